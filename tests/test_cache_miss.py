"""Why a turn missed the prompt cache: the offset where the prompt parts from the longest cached prefix, the part
of the request it falls in, and the reason — in the request log line, /profile, /metrics and Anthropic's
cache-diagnosis ``diagnostics``."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from tinytitan.chat_request import ChatRequest, Message, Tool, ToolCall
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

from anthropic_util import HEADERS, MODEL


@pytest.fixture
def backend(demo_tok):
    return ScriptedBackend([ScriptEntry("A fine answer.")], demo_tok, prompt_cache=PromptCache(1 << 30))


def _req(msgs, tools=(), **kw):
    return ChatRequest(model=MODEL, messages=tuple(m if isinstance(m, Message) else Message(*m) for m in msgs),
                       tools=tuple(Tool(n, f"the {n} tool") for n in tools), **kw)


SYSTEM = ("system", "You are a coding agent. " * 20)
TOOLS = ("Read", "Grep", "Bash")


def _turn(backend, req, answer="A fine answer.<|im_end|>"):
    """Prepare a request as the engine does, then store what its generation would leave in the cache."""
    p = backend.prepare(req)
    backend.prompt_cache.store(list(p.tokens) + backend.tokenizer.encode(answer, add_special_tokens=False), None)
    return p.cache_miss


def test_each_reason_from_the_request_that_changed(backend):
    first = [SYSTEM, ("user", "Read the parser. " * 10)]
    miss = _turn(backend, _req(first, TOOLS))
    assert miss["reason"] == "cold" and miss["offset"] == 0
    # the answer sent back as other text than was generated: the prompt parts inside the generated span
    rewritten = backend.prepare(_req(first + [("assistant", "A fine reply."), ("user", "Now fix it.")], TOOLS))
    assert rewritten.cache_miss["reason"] == "answer_rewritten" and rewritten.cache_miss["where"] == "the previous answer"
    convo = first + [("assistant", "A fine answer."), ("user", "Now fix it.")]
    miss = _turn(backend, _req(convo, TOOLS))
    assert miss["reason"] == "hit" and miss["missed_tokens"] == 0

    def probe(msgs, tools=TOOLS, **kw):
        return backend.prepare(_req(msgs, tools, **kw)).cache_miss

    changed = probe([("system", "You are a coding agent. " * 19 + "Today is 2026-12-01.")] + convo[1:])
    assert changed["reason"] == "system_changed" and changed["where"] == "message 0 (system)"
    assert 0 < changed["offset"] < 200 and changed["missed_tokens"] > 0
    billing = probe([("system", "x-anthropic-billing-header: cch=abc;\n" + SYSTEM[1])] + convo[1:])
    assert billing["reason"] == "system_changed"
    reordered = probe(convo, ("Grep", "Read", "Bash"))
    assert reordered["reason"] == "tools_changed" and reordered["detail"] == "reordered"
    assert reordered["where"] == "tool 0"
    added = probe(convo, TOOLS + ("Edit",))
    assert added["reason"] == "tools_changed" and added["detail"] == "1 added"
    edited = probe([SYSTEM, ("user", "Read the lexer. " * 10)] + convo[2:])
    assert edited["reason"] == "messages_changed" and edited["where"] == "message 1 (user) content"
    # an assistant message that changed against the request that made the entry
    rewritten = probe(first + [("assistant", "A fine reply."), ("user", "Now fix it.")])
    assert rewritten["reason"] == "messages_changed" and rewritten["where"] == "message 2 (assistant) content"
    # tool_choice none: the template renders no tools, while the request's tools are the same ones
    settings = probe(convo, tool_choice="none")
    assert settings["reason"] == "settings_changed" and settings["offset"] < 200 and settings["missed_tokens"] > 0


CALL = ToolCall("c1", "Read", '{"path": "parser.py"}')
THOUGHT = "I should read it first."


def _tool_loop(reasoning: str | None) -> list:
    """An agent's tool loop: the assistant thought (or not) and called Read; the result came back."""
    return [SYSTEM, ("user", "Read it."), Message("assistant", "", (CALL,), reasoning=reasoning),
            Message("tool", "def parse(): ...", tool_call_id="c1", name="Read")]


def test_thinking_dropped_by_the_client(backend):
    """The demo template (Qwen3's) renders the thought of a turn after the last user message: a client that
    sends that turn back without its thinking parts the prompt there."""
    _turn(backend, _req(_tool_loop(THOUGHT), TOOLS))
    miss = backend.prepare(_req(_tool_loop(None), TOOLS)).cache_miss
    assert miss["reason"] == "thinking_dropped" and miss["where"] == "message 2 (assistant) thinking"
    assert miss["detail"] == "sent with its thinking before, without it now" and miss["missed_tokens"] > 0


def test_thinking_dropped_by_the_template(backend):
    """The same turn sent back whole, but a new user message came: the template stops rendering its thought."""
    _turn(backend, _req(_tool_loop(THOUGHT), TOOLS))
    later = _tool_loop(THOUGHT) + [("assistant", "It parses."), ("user", "And now?")]
    miss = backend.prepare(_req(later, TOOLS)).cache_miss
    assert miss["reason"] == "thinking_dropped" and miss["where"] == "message 2 (assistant) thinking"
    assert miss["detail"] == "the template no longer renders an earlier turn's thinking"


def test_template_rerender(backend):
    """The messages only grow, nothing carries thinking, yet the template renders an earlier one otherwise (a
    last assistant turn gets an empty thought block that it loses once another turn follows)."""
    first = [SYSTEM, ("user", "Say something."), ("assistant", "Sure.")]
    _turn(backend, _req(first, TOOLS))
    miss = backend.prepare(_req(first + [("user", "More.")], TOOLS)).cache_miss
    assert miss["reason"] == "template_rerender" and miss["missed_tokens"] > 0


def test_eviction(backend):
    msgs = [SYSTEM, ("user", "Read it."), ("assistant", "Done."), ("user", "And now?")]
    _turn(backend, _req(msgs))
    backend.prompt_cache.evict_all()  # what the byte budget does
    evicted = backend.prepare(_req(msgs))
    assert evicted.cache_miss["reason"] == "evicted"


def test_a_prompt_sharing_more_that_kept_no_entry_yet_is_in_flight_not_evicted(backend):
    """Two sub-agents with the same long system prompt, started together: the second is prepared while the
    first is still generating (it has stored nothing). Nothing was evicted: the diagnosis says so."""
    backend.prepare(_req([SYSTEM, ("user", "Find the parser.")]))
    second = backend.prepare(_req([SYSTEM, ("user", "Find the lexer.")])).cache_miss
    assert second["reason"] == "in_flight" and second["missed_tokens"] > 32
    assert "still being generated" in second["detail"]
    # once the first one's entry is stored and then evicted, the same question reads as evicted
    _turn(backend, _req([SYSTEM, ("user", "Find the parser.")]))
    backend.prompt_cache.evict_all()
    third = backend.prepare(_req([SYSTEM, ("user", "Find the tests.")])).cache_miss
    assert third["reason"] == "evicted"


def test_an_entry_too_large_for_the_budget_reads_as_evicted(demo_tok):
    """A generation whose cache would not fit the byte budget keeps none: the next turn reads as evicted."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    backend = ScriptedBackend([ScriptEntry("A fine answer.")], demo_tok, prompt_cache=PromptCache(1 << 10))
    msgs = [SYSTEM, ("user", "Read it.")]
    p = backend.prepare(_req(msgs))
    kv = KVCache()
    n = len(p.tokens)
    kv.update_and_fetch(mx.zeros((1, 2, n, 64)), mx.zeros((1, 2, n, 64)))
    assert backend.prompt_cache.store(list(p.tokens), [kv]) is None  # more than the budget: not kept
    again = backend.prepare(_req(msgs + [("assistant", "Done."), ("user", "And now?")])).cache_miss
    assert again["reason"] == "evicted"


async def test_the_reason_in_the_log_profile_metrics_and_anthropic_diagnostics(serve, backend, caplog):
    import anthropic

    s = await serve(backend=backend)
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
              {"type": "text", "text": "Be careful. " * 40}]
    body = {"model": MODEL, "max_tokens": 16, "system": system,
            "messages": [{"role": "user", "content": "hello " * 20}]}
    beta = {"anthropic-beta": "cache-diagnosis-2026-04-07"}
    async with httpx.AsyncClient(timeout=30) as c:
        async def post(payload, extra=None):
            r = await c.post(s.url("/v1/messages"), json=payload, headers={**HEADERS, **(extra or {})})
            assert r.status_code == 200, r.text
            return r.json()

        caplog.set_level(logging.INFO, logger="tinytitan.requests")
        first = await post(body, beta)
        assert first["diagnostics"] == {"cache_miss_reason": {"type": "previous_message_not_found"}}
        anthropic.types.Message.model_validate(first, strict=True)
        again = await post(body, beta)  # the same prompt: nothing lost, nothing to report
        assert again.get("diagnostics") is None
        changed = dict(body, system=[system[0], {"type": "text", "text": "Be careful. " * 39 + "Now: 12:01."}])
        plain = await post(changed)  # no beta header, no diagnostics object: no field
        assert "diagnostics" not in plain
        changed2 = dict(changed, system=[system[0], {"type": "text", "text": "Be careful. " * 39 + "Now: 12:02."}],
                        diagnostics={"previous_message_id": plain["id"]})  # the object opts in by itself
        diag = await post(changed2)
        reason = diag["diagnostics"]["cache_miss_reason"]
        assert reason["type"] == "system_changed" and reason["cache_missed_input_tokens"] > 0
        parsed = anthropic.types.Message.model_validate(diag, strict=True)
        assert parsed.diagnostics.cache_miss_reason.type == "system_changed"

        # streamed: message_start carries it
        events = []
        async with c.stream("POST", s.url("/v1/messages"), headers={**HEADERS, **beta},
                            json=dict(body, stream=True, messages=[{"role": "user", "content": "other " * 20}])) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        start = events[0]["message"]
        assert start["diagnostics"]["cache_miss_reason"]["type"] == "messages_changed"
        anthropic.types.RawMessageStartEvent.model_validate(events[0], strict=True)

        profile = (await c.get(s.url("/profile"))).json()["data"]
        assert [p["cache_miss"]["reason"] for p in profile] == ["cold", "hit", "system_changed", "system_changed",
                                                                "messages_changed"]
        assert profile[2]["cache_miss"]["where"] == "message 0 (system)"
        metrics = (await c.get(s.url("/metrics"))).text
    assert f'tinytitan_prompt_cache_misses_by_reason_total{{model="{MODEL}",reason="system_changed"}} 2.0' in metrics
    assert 'reason="hit"' not in metrics  # a hit is no miss (tinytitan_prompt_cache_hits counts hits)
    lines = [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests" and "POST" in r.getMessage()]
    assert " cache=cold@0:-" in lines[0] and " cache=hit " in lines[1]
    assert " cache=system_changed@" in lines[3] and ":message_0_(system) cache_lost=" in lines[3]


def test_a_system_message_is_fingerprinted_by_its_lines():
    """Its lines, whatever ends them (as when it was hashed line by line): one changed line changes it."""
    from tinytitan.engine.cache.miss import Fingerprint

    def fp(system: str) -> tuple:
        return Fingerprint.of(ChatRequest(model="m", messages=(Message("system", system), Message("user", "hi")))).system

    assert fp("You are a coder.\nBe brief.") == fp("You are a coder.\r\nBe brief.")
    assert fp("You are a coder.\nBe brief.") != fp("You are a coder.\nBe briefer.")
    assert fp("a\nb") != fp("a b")


def test_a_request_continues_another_after_its_final_answer():
    """``Fingerprint.answered_by``: the same system and tools, the earlier messages (their thinking aside), then an
    assistant message that calls no tool. An answer that calls a tool (its loop goes on), a fork (a user message
    where the answer was), another system prompt or other tools, an edited message, or the same request again
    do not."""
    from tinytitan.engine.cache.miss import Fingerprint

    weather = Tool("weather", "w", {"type": "object"})
    system, ask = Message("system", "You are an agent."), Message("user", "Look at a.py.")
    thought = Message("assistant", "Reading.", reasoning="I should read it.")
    base = ChatRequest("m", (system, ask, thought, Message("user", "Go on.")), (weather,))
    fp = Fingerprint.of(base)
    answered = base.messages + (Message("assistant", "Done."),)

    def later(messages, tools=(weather,), reasoning=None):
        return Fingerprint.of(ChatRequest("m", messages, tools, reasoning=reasoning))

    assert fp.answered_by(later(answered + (Message("user", "Next."),)))
    assert fp.answered_by(later(answered, reasoning=True))  # settings aside
    dropped = (system, ask, Message("assistant", "Reading."), base.messages[3], answered[-1])
    assert fp.answered_by(later(dropped))  # its thinking dropped by the client
    call = ToolCall("call_1", "weather", "{}")
    assert not fp.answered_by(later(base.messages + (Message("assistant", "", (call,)),
                                                     Message("tool", "sunny", tool_call_id="call_1"))))
    assert not fp.answered_by(later(base.messages + (Message("user", "Stop."),)))  # a fork
    assert not fp.answered_by(later(base.messages))  # the same request again
    assert not fp.answered_by(later(answered, tools=()))
    assert not fp.answered_by(later((Message("system", "Another agent."),) + answered[1:]))
    assert not fp.answered_by(later((system, Message("user", "Look at b.py.")) + answered[2:]))


def test_renamed_call_ids_are_named_where_the_template_writes_them():
    """A client that renames its tool calls' ids each turn (the messages otherwise the same): where the prompt parts
    inside what was cached, the diagnosis names the message whose ids changed, not a template re-render. Ids that
    change where the content changed earlier are not named: the earlier change is."""
    from tinytitan.engine.cache.miss import Fingerprint, Probe, diagnose

    def loop(call_id, ask="Read it."):
        call = ToolCall(call_id, "Read", '{"path": "parser.py"}')
        return _req([SYSTEM, ("user", ask), Message("assistant", "", (call,)),
                     Message("tool", "def parse(): ...", tool_call_id=call_id, name="Read"),
                     ("user", "Go on.")], TOOLS)

    before = Fingerprint.of(loop("call_1"))
    assert Fingerprint.from_json(json.loads(json.dumps(before.as_json()))) == before  # a group follower's copy
    probe = Probe(n=300, length=400, fingerprint=before, prompt_length=400, recent=300, any_entry=True)
    renamed = loop("call_9")
    miss = diagnose(renamed, Fingerprint.of(renamed), range(500), probe)
    assert (miss.reason, miss.where) == ("messages_changed", "message 2 (assistant) ids")
    assert miss.detail == "its tool calls' ids changed, which the template writes"
    edited = loop("call_9", ask="Read the lexer.")
    miss = diagnose(edited, Fingerprint.of(edited), range(500), probe)
    assert (miss.reason, miss.where) == ("messages_changed", "message 1 (user) content")
    same = loop("call_1")  # nothing changed that the request says: the template wrote it otherwise
    assert diagnose(same, Fingerprint.of(same), range(500), probe).reason == "template_rerender"
    # where the rendered prompt is known, the ids are named only where the template writes them (Qwen3's not)
    assert diagnose(renamed, Fingerprint.of(renamed), range(500), probe, '{"id": "call_9"}').where == \
        "message 2 (assistant) ids"
    assert diagnose(renamed, Fingerprint.of(renamed), range(500), probe, "no ids here").reason == "template_rerender"
    assert before.answered_by(Fingerprint.of(_req([*loop("call_9").messages, ("assistant", "Done.")], TOOLS)))
