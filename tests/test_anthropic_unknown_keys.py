"""Unknown keys inside Messages' option objects (tool_choice, thinking, output_config, context_management) are
refused by name, in the API's own words and place (pydantic's: ``thinking.adaptive.foo: Extra inputs are not
permitted``, which Claude Code matches to drop what it sent and go on); every key the real clients send stays
accepted."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import pytest

from anthropic_util import MODEL, assert_envelope, body, post, sdk

TOOLS = [{"name": "f", "input_schema": {"type": "object"}}]
EXTRA = "Extra inputs are not permitted"

# (the request's change, the place the API names)
REFUSED = [
    ({"tool_choice": {"type": "auto", "foo": 1}}, "tool_choice.auto.foo"),
    ({"tool_choice": {"type": "tool", "name": "f", "disable_parallel": True}}, "tool_choice.tool.disable_parallel"),
    ({"tool_choice": {"type": "any", "name": "f"}}, "tool_choice.any.name"),
    ({"thinking": {"type": "adaptive", "budget_tokens": 2048}}, "thinking.adaptive.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024, "budget": 1}}, "thinking.enabled.budget"),
    ({"thinking": {"type": "disabled", "display": "omitted"}}, "thinking.disabled.display"),
    ({"output_config": {"effort": "high", "efort": "low"}}, "output_config.efort"),
    ({"context_management": {"edits": [], "mode": "auto"}}, "context_management.mode"),
    ({"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all", "turns": 1}]}},
     "context_management.edits.0.clear_thinking_20251015.turns"),
    ({"context_management": {"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 2,
                                                                                      "min": 1}}]}},
     "context_management.edits.0.clear_tool_uses_20250919.keep.min"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),  # a top-level one, in the same words
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}, "defer": True}]}, "tools.0.custom.defer"),
]


@pytest.mark.parametrize("change,where", REFUSED, ids=[w for _, w in REFUSED])
async def test_an_unknown_key_is_refused_by_its_place(serve, change, where):
    s = await serve(["never generated"])
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = await post(s, body(**{"tools": TOOLS, **change}), path)
        d = assert_envelope(r, 400, "invalid_request_error")
        assert d["error"]["message"] == f"{where}: {EXTRA}", d


async def test_the_sdk_reads_the_refusal(serve):
    s = await serve(["never generated"])
    with pytest.raises(anthropic.BadRequestError) as exc:
        await sdk(s).messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                     extra_body={"thinking": {"type": "adaptive", "foo": 1}})
    assert exc.value.body["error"]["message"] == f"thinking.adaptive.foo: {EXTRA}"


# what the clients send inside these objects (Claude Code's from its recorded traces, below): all taken
ACCEPTED = [
    {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},   # the Vercel AI SDK's
    {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
    {"tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": False}},
    {"tool_choice": {"type": "none"}},
    {"thinking": {"type": "adaptive", "display": "updates"}},   # Claude Code's
    {"thinking": {"type": "adaptive", "display": "summarized", "block_binding": {"prefix_mismatch_behavior": "x"}}},
    {"thinking": {"type": "enabled", "budget_tokens": 1024, "display": "summarized"}, "max_tokens": 2048},  # pi's
    {"thinking": {"type": "disabled"}},
    {"thinking": {"type": "between_tools"}},
    {"output_config": {"effort": "high", "task_budget": {"type": "tokens", "total": 5000}}},
    {"output_config": {"effort": None, "format": {"type": "json_schema", "schema": {"type": "object"}}}},
    {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"},
                                      {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens",
                                                                                       "value": 100000},
                                       "keep": {"type": "tool_uses", "value": 3}, "clear_at_least":
                                       {"type": "input_tokens", "value": 5000}, "exclude_tools": ["f"],
                                       "clear_tool_inputs": True}]}},
]


@pytest.mark.parametrize("change", ACCEPTED, ids=[json.dumps(c)[:60] for c in ACCEPTED])
async def test_the_clients_keys_are_taken(serve, change):
    s = await serve(["never generated"])  # a count reads the whole request (a forced call would need a script)
    r = await post(s, body(tools=TOOLS, **change), "/v1/messages/count_tokens")
    assert r.status_code == 200, r.text


TRACES = Path(__file__).parent / "traces" / "claude"


def test_claude_codes_recorded_options_are_taken():
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    proto, seen = AnthropicMessages(), 0
    for trace in sorted(TRACES.glob("*.jsonl")):
        for line in trace.read_text().splitlines():
            sent = json.loads(line)["body"]
            options = {k: sent[k] for k in ("tool_choice", "thinking", "output_config", "context_management")
                       if k in sent}
            if options:
                seen += 1
                proto.validator.validate(body(max_tokens=sent.get("max_tokens") or 256, **options))
    assert seen
