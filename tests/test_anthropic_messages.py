"""Anthropic Messages through the official SDK: create, stream, count_tokens, tools, thinking, system placement."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from anthropic_util import HEADERS, MODEL, body, chat_request, post, protocol, rendered, sdk, sse
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


async def test_create_returns_a_message(serve):
    s = await serve(["<think>Let me see.</think>Hello there."])
    m = await sdk(s).messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert m.id.startswith("msg_") and m.type == "message" and m.role == "assistant" and m.model == MODEL
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "Let me see." and m.content[0].signature == "tinytitan-unsigned"
    assert m.content[1].text == "Hello there."
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens == len(s.engine.backend.encode(chat_request(s, body()))[1])
    assert m.usage.output_tokens > 0
    assert m.usage.cache_read_input_tokens == 0 and m.usage.cache_creation_input_tokens == 0


async def test_stream_final_message_equals_the_non_stream_fold(serve):
    out = "<think>Plan.</think>Sure. " + TOOL_CALL
    s = await serve([out, out])
    c = sdk(s)
    kw = dict(model=MODEL, max_tokens=200, tools=[WEATHER], messages=[{"role": "user", "content": "weather?"}])
    async with c.messages.stream(**kw) as stream:
        texts = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    plain = await c.messages.create(**kw)
    assert "".join(texts) == "Sure."
    for m in (final, plain):
        assert [b.type for b in m.content] == ["thinking", "text", "tool_use"]
        assert m.content[2].name == "get_weather" and m.content[2].input == {"city": "Paris"}
        assert m.stop_reason == "tool_use"
    strip = lambda m: m.model_dump(exclude={"id"}, exclude_none=True)  # noqa: E731
    f, p = strip(final), strip(plain)
    for block in f["content"] + p["content"]:
        block.pop("id", None)
        block.pop("parsed_output", None)
    assert f == p


async def test_tool_round_trip(serve):
    s = await serve([TOOL_CALL, "It is sunny in Paris."])
    c = sdk(s)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = await c.messages.create(model=MODEL, max_tokens=200, tools=[WEATHER], messages=messages)
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert call.type == "tool_use" and call.input == {"city": "Paris"}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21C"}]}]
    second = await c.messages.create(model=MODEL, max_tokens=200, tools=[WEATHER], messages=messages)
    assert second.stop_reason == "end_turn" and second.content[0].text == "It is sunny in Paris."
    prompt = rendered(s, body(tools=[WEATHER], messages=messages))
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny, 21C\n</tool_response>" in prompt


def test_tool_results_fan_out_lead_the_turn_and_errors_are_marked(demo_tok):
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    proto = AnthropicMessages()
    v = proto.validator.validate(body(messages=[
        {"role": "user", "content": "do two things"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "sig"},
                                          {"type": "text", "text": "ok"},
                                          {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": 1}},
                                          {"type": "tool_use", "id": "t2", "name": "b", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "one",
                                      "cache_control": {"type": "ephemeral"}},
                                     {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
                                      "content": [{"type": "text", "text": "bad"}]},
                                     {"type": "text", "text": "and then?"}]},
        {"role": "user", "content": "also this"},
    ]))
    msgs = v.args["messages"]
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool", "user"]
    assert msgs[1].content == "ok" and msgs[1].reasoning == "hm"  # thinking sent back: the turn's reasoning
    assert [(c.id, c.name, json.loads(c.arguments)) for c in msgs[1].tool_calls] == [("t1", "a", {"x": 1}),
                                                                                    ("t2", "b", {})]
    assert (msgs[2].tool_call_id, msgs[2].name, msgs[2].content) == ("t1", "a", "one")
    assert (msgs[3].tool_call_id, msgs[3].name, msgs[3].content) == ("t2", "b", "Error: bad")
    assert msgs[4].content == "and then?\n\nalso this"  # consecutive user turns combine


async def test_thinking_off_and_budget_ladder(serve):
    s = await serve(["Plain answer."])
    off = rendered(s, body(thinking={"type": "disabled"}))
    on = rendered(s, body(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048}))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")
    levels = {b: chat_request(s, body(max_tokens=64000, thinking={"type": "enabled", "budget_tokens": b})).reasoning
              for b in (1024, 4095, 4096, 16383, 16384, 50000)}
    assert levels == {1024: "low", 4095: "low", 4096: "medium", 16383: "medium", 16384: "xhigh", 50000: "xhigh"}
    assert chat_request(s, body(thinking={"type": "disabled"})).reasoning is False
    assert chat_request(s, body(thinking={"type": "adaptive"})).reasoning is None
    assert chat_request(s, body(thinking={"type": "adaptive"}, output_config={"effort": "high"})).reasoning == "high"
    assert chat_request(s, body(output_config={"effort": "max"})).reasoning == "max"
    assert chat_request(s, body(thinking={"type": "disabled"}, output_config={"effort": "high"})).reasoning is False
    assert chat_request(s, body(chat_template_kwargs={"enable_thinking": False})).reasoning is False
    m = await sdk(s).messages.create(model=MODEL, max_tokens=100, thinking={"type": "disabled"},
                                     messages=[{"role": "user", "content": "hi"}])
    assert [b.type for b in m.content] == ["text"]


async def test_thinking_on_returns_a_thinking_block(serve):
    s = await serve(["<think>Deep thought.</think>42"])
    m = await sdk(s).messages.create(model=MODEL, max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": "?"}])
    assert m.content[0].type == "thinking" and m.content[0].thinking == "Deep thought."
    assert m.content[0].signature == "tinytitan-unsigned" and m.content[1].text == "42"


async def test_a_budget_over_max_tokens_is_allowed_only_with_interleaved_thinking(serve):
    """Anthropic's rule: budget_tokens < max_tokens, except under the interleaved-thinking beta (which Claude
    Code always sends), where the budget spans the turn's tool calls."""
    s = await serve(["<think>t</think>ok"])
    big = body(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 8000})
    r = await post(s, big)
    assert r.status_code == 400 and "budget_tokens" in r.text
    beta = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"}
    r = await post(s, big, headers=beta)
    assert r.status_code == 200 and r.json()["content"][-1]["text"] == "ok"
    r = await post(s, big, "/v1/messages/count_tokens", headers=beta)
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


async def test_thinking_display_omitted_returns_an_empty_thinking_block(serve):
    s = await serve(["<think>Private.</think>Public."])
    m = await sdk(s).messages.create(model=MODEL, max_tokens=4000, messages=[{"role": "user", "content": "?"}],
                                     thinking={"type": "enabled", "budget_tokens": 1024, "display": "omitted"})
    assert [(b.type, getattr(b, "thinking", None)) for b in m.content] == [("thinking", ""), ("text", None)]


async def test_stop_sequences_and_max_tokens(serve):
    s = await serve(["one two STOP three", "a long answer that goes on and on and on", "<think>x</think>fine"])
    c = sdk(s)
    m = await c.messages.create(model=MODEL, max_tokens=100, stop_sequences=["STOP"],
                                messages=[{"role": "user", "content": "count"}])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP" and m.content[0].text == "one two "
    m = await c.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "talk"}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3


def test_stop_reason_is_derived_once():
    from tinytitan.events import Finished
    from tinytitan.protocols.anthropic_messages import stop_reason

    table = {"stop": "end_turn", "length": "max_tokens", "stop_sequence": "stop_sequence", "tool_calls": "tool_use"}
    assert stop_reason(Finished("stop"), None, table) == ("end_turn", None)
    assert stop_reason(Finished("length"), None, table) == ("max_tokens", None)
    assert stop_reason(Finished("tool_calls"), None, table) == ("tool_use", None)
    assert stop_reason(Finished("stop_sequence", stop_sequence="X"), ["X"], table) == ("stop_sequence", "X")
    # a stop the client did not send (a template's own) is the model ending its turn
    assert stop_reason(Finished("stop_sequence", stop_sequence="<|im_end|>"), ["X"], table) == ("end_turn", None)


async def test_max_tokens_is_clamped_to_the_context_window(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry("Short.")], demo_tok, model_id=MODEL, context_window=400)
    s = await serve(backend=backend)
    m = await sdk(s).messages.create(model=MODEL, max_tokens=32000, messages=[{"role": "user", "content": "hi"}],
                                     timeout=30)  # an explicit timeout: the SDK refuses a long non-stream call
    assert m.content[0].text == "Short."
    prepared = await s.engine.prepare(chat_request(s, body(max_tokens=32000)))
    assert prepared.max_tokens == 400 - len(prepared.tokens)
    too_long = await post(s, body(messages=[{"role": "user", "content": "word " * 2000}]))
    assert too_long.status_code == 400 and too_long.json()["error"]["type"] == "invalid_request_error"
    assert "context window" in too_long.json()["error"]["message"]


async def test_count_tokens_matches_generation(serve):
    s = await serve(["ok"])
    c = sdk(s)
    kw = dict(model=MODEL, system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
              tools=[WEATHER], messages=[{"role": "user", "content": "weather?"}])
    counted = await c.messages.count_tokens(**kw)
    made = await c.messages.create(max_tokens=50, **kw)
    assert counted.input_tokens == made.usage.input_tokens > 0
    raw = await post(s, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                     "/v1/messages/count_tokens?beta=true")
    assert raw.status_code == 200 and set(raw.json()) == {"input_tokens"}
    assert raw.headers["request-id"].startswith("req_")
    # the same system handling: a mid-conversation system message counts where generation puts it
    kw2 = dict(model=MODEL, messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                       {"role": "system", "content": "remember"}, {"role": "user", "content": "c"}])
    n = (await c.messages.count_tokens(**kw2)).input_tokens
    assert n == len(s.engine.backend.encode(chat_request(s, body(**kw2)))[1])


async def test_mid_conversation_system_message_keeps_the_prefix(serve):
    s = await serve(["ok"])
    first = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": "next"}]
    later = first + [{"role": "assistant", "content": "done"}, {"role": "system", "content": "Files changed."},
                     {"role": "user", "content": "more"}]
    a = rendered(s, body(system="You are terse.", messages=first))
    b = rendered(s, body(system="You are terse.", messages=later))
    assert b.startswith(a)  # everything the first request cached is still the second one's prefix
    assert "<|im_start|>user\n<system-reminder>\nFiles changed.\n</system-reminder><|im_end|>" in b
    assert b.index("Files changed.") > b.index("done")
    assert b.count("<|im_start|>system") == 1 and "Files changed." not in b.split("<|im_end|>")[0]
    # a leading system message with no top-level system is the system turn
    lead = rendered(s, body(messages=[{"role": "system", "content": "Lead."}, {"role": "user", "content": "q"}]))
    assert lead.startswith("<|im_start|>system\nLead.<|im_end|>")
    m = await sdk(s).messages.create(model=MODEL, max_tokens=20, messages=later)
    assert m.content[0].text == "ok"


async def test_roles_ctx_and_msg_are_user_turns(serve):
    s = await serve(["ok"])
    req = chat_request(s, body(messages=[{"role": "ctx", "content": "context"}, {"role": "msg", "content": "q"}]))
    assert [(m.role, m.content) for m in req.messages] == [("user", "context\n\nq")]


async def test_template_variables_pass_through(serve):
    s = await serve(["ok"])
    req = chat_request(s, body(template_vars={"custom": 1}, chat_template_kwargs={"other": "x",
                                                                                  "enable_thinking": False}))
    assert req.template_kwargs == {"custom": 1, "other": "x"} and req.reasoning is False


CLAUDE_CODE_TOOLS = [
    {"name": name, "description": f"The {name} tool.",
     "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
                      "properties": {"arg": {"type": "string", "description": "an argument"}}, "required": ["arg"]},
     **({"cache_control": {"type": "ephemeral"}, "strict": True, "defer_loading": False, "eager_input_streaming": True,
         "input_examples": [{"arg": "x"}], "type": "custom"} if name == "WebSearch" else {})}
    for name in ["Task", "Bash", "Glob", "Grep", "ExitPlanMode", "Read", "Edit", "MultiEdit", "Write", "NotebookEdit",
                 "WebFetch", "TodoWrite", "WebSearch", "BashOutput", "KillShell", "SlashCommand", "Skill",
                 "AskUserQuestion", "EnterPlanMode", "ListMcpResources", "ReadMcpResource", "TaskOutput"]
]


def claude_code_body(messages: list) -> dict:
    return {
        "model": MODEL,
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3.abc; cc_entrypoint=sdk-cli; cch=7f3a;"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are an interactive CLI tool that helps users with software engineering tasks.",
             "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "messages": messages,
        "tools": CLAUDE_CODE_TOOLS,
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "medium"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "user_abc_account__session_123"},
        "temperature": 1,
    }


CC_HEADERS = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
              "anthropic-dangerous-direct-browser-access": "true", "x-app": "cli",
              "user-agent": "claude-cli/2.1.3 (external, sdk-cli)", "x-stainless-retry-count": "0"}


async def test_a_claude_code_shaped_session(serve):
    # the template's spaced JSON, as the mask writes it: WebSearch is strict, so a call once opened is masked
    s = await serve(['<tool_call>\n{"name": "Bash", "arguments": {"arg": "echo hi"}}\n</tool_call>',
                     "<think>It printed hi.</think>The command printed hi."])
    async with httpx.AsyncClient(timeout=30) as c:
        head = await c.head(s.url("/"))  # Claude Code's reachability check: no anthropic-version header
        assert head.status_code == 200 and head.headers["request-id"].startswith("req_")
    messages = [
        {"role": "system", "content": "Current date: 2026-11-30."},
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer, use the tools.\n</system-reminder>"},
            {"type": "text", "text": "run echo hi", "cache_control": {"type": "ephemeral"}}]},
    ]
    r = await post(s, claude_code_body(messages), "/v1/messages?beta=true", CC_HEADERS)
    assert r.status_code == 200, r.text
    events = sse(r.text)
    names = [e for e, _ in events]
    assert names[:2] == ["message_start", "content_block_start"] and set(names[2:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    tool = next(d["content_block"] for e, d in events if e == "content_block_start")
    assert tool["type"] == "tool_use" and tool["name"] == "Bash"
    args = "".join(d["delta"]["partial_json"] for e, d in events if e == "content_block_delta")
    assert json.loads(args) == {"arg": "echo hi"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    messages += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": tool["id"], "name": "Bash",
                                           "input": {"arg": "echo hi"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool["id"], "content": "hi\n",
                                      "cache_control": {"type": "ephemeral"}}]},
    ]
    r = await post(s, claude_code_body(messages), "/v1/messages?beta=true", CC_HEADERS)
    events = sse(r.text)
    kinds = [d["content_block"]["type"] for e, d in events if e == "content_block_start"]
    assert kinds == ["thinking", "text"] and events[-1][0] == "message_stop"
    prompt = rendered(s, {k: v for k, v in claude_code_body(messages).items() if k != "stream"})
    assert "x-anthropic-billing-header" not in prompt  # per-session noise kept out of the cached prefix
    assert prompt.startswith("<|im_start|>system\nYou are Claude Code")
    assert "Current date: 2026-11-30." in prompt.split("# Tools")[0]  # first-position system joins the system turn
    assert '"$schema"' in prompt and "<tool_response>\nhi\n\n</tool_response>" in prompt


async def test_model_listing_in_anthropic_shape(serve):
    s = await serve(["ok"])
    c = sdk(s)
    page = await c.models.list()
    assert [m.id for m in page.data] == [MODEL] and page.data[0].type == "model"
    one = await c.models.retrieve(MODEL)
    assert one.id == MODEL and one.display_name
    with pytest.raises(anthropic.NotFoundError) as exc:
        await c.models.retrieve("claude-nope")
    assert exc.value.body["error"]["type"] == "not_found_error"
    async with httpx.AsyncClient() as h:
        r = await h.get(s.url("/v1/models"), headers=HEADERS)
        assert r.json()["has_more"] is False and r.headers["request-id"].startswith("req_")
        root = await h.head(s.url("/"), headers=HEADERS)
        assert root.status_code == 200


async def test_the_fast_model_name(serve):
    s = await serve(["quick"])
    m = await sdk(s).messages.create(model=MODEL + "-fast", max_tokens=20, tools=[WEATHER],
                                     messages=[{"role": "user", "content": "hi"}])
    assert m.model == MODEL and m.content[0].text == "quick"
