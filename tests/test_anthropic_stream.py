"""The Messages stream grammar, event by event; the table walked pair by pair; pings while the model is slow."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import httpx
import pytest
import trio

from anthropic_util import HEADERS, MODEL, body, post, sdk, sse
from tinytitan.events import (Failed, Finished, KeepAlive, ReasoningDelta, Started, TextDelta, ToolCallArgsDelta,
                              ToolCallDone, ToolCallStarted, Usage)
from tinytitan.speclang.machine import Machine, MachineError

ROOT = Path(__file__).resolve().parent.parent
CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def check_grammar(events: list) -> list[dict]:
    """The rules every Messages stream keeps; returns the content blocks as the stream built them."""
    names = [e for e, _ in events]
    for name, data in events:
        assert data["type"] == name  # the SSE event name is the payload's type
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "[DONE]" not in names and all(isinstance(d, dict) for _, d in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0
    blocks: list[dict] = []
    open_index = None
    for name, d in events[1:-2]:
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_index is None and d["index"] == len(blocks)  # lazily opened, numbered in open order
            open_index = d["index"]
            blocks.append(dict(d["content_block"], _json=""))
        elif name == "content_block_delta":
            assert d["index"] == open_index
            kind, block = d["delta"]["type"], blocks[open_index]
            expected = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "thinking",
                        "input_json_delta": "tool_use"}[kind]
            assert block["type"] == expected
            if kind == "text_delta":
                block["text"] += d["delta"]["text"]
            elif kind == "thinking_delta":
                block["thinking"] += d["delta"]["thinking"]
            elif kind == "input_json_delta":
                block["_json"] += d["delta"]["partial_json"]
        elif name == "content_block_stop":
            assert d["index"] == open_index
            open_index = None
        else:
            raise AssertionError(f"unexpected {name} inside the message")
    assert open_index is None
    usage = events[-2][1]["usage"]
    assert set(usage) == {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"}
    return blocks


async def test_stream_event_by_event(serve):
    out = ("<think>First, plan.</think>I will look. " + CALL.format(name="read", args='{"path": "a.py"}')
           + CALL.format(name="read", args='{"path": "b.py"}'))
    s = await serve([out])
    r = await post(s, body(stream=True, tools=[{"name": "read", "input_schema": {"type": "object"}}]),
                   "/v1/messages?beta=true")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["request-id"].startswith("req_")
    events = sse(r.text)
    blocks = check_grammar(events)
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert blocks[0]["thinking"] == "First, plan." and blocks[0]["signature"] == ""
    assert blocks[1]["text"] == "I will look."
    assert [json.loads(b["_json"]) for b in blocks[2:]] == [{"path": "a.py"}, {"path": "b.py"}]
    assert blocks[2]["id"] != blocks[3]["id"] and blocks[2]["input"] == {}
    # the exact shape, event by event, of the first blocks
    names = [e for e, _ in events]
    first_text = names.index("content_block_start", 1 + names.index("content_block_stop"))
    assert names[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert names[first_text - 2:first_text] == ["content_block_delta", "content_block_stop"]
    assert events[first_text - 2][1]["delta"] == {"type": "signature_delta", "signature": "tinytitan-unsigned"}
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-1][1] == {"type": "message_stop"}
    start_usage = events[0][1]["message"]["usage"]
    assert start_usage["input_tokens"] == events[-2][1]["usage"]["input_tokens"] > 0


async def test_stream_of_text_only_and_a_stop_sequence(serve):
    s = await serve(["Hello world. END and more"])
    events = sse((await post(s, body(stream=True, stop_sequences=["END"]))).text)
    assert [e for e, _ in events] == ["message_start", "content_block_start"] + ["content_block_delta"] * (
        len(events) - 5) + ["content_block_stop", "message_delta", "message_stop"]
    blocks = check_grammar(events)
    assert blocks[0]["text"] == "Hello world. "
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


async def test_an_empty_answer_still_has_a_well_formed_stream(serve):
    s = await serve([""])
    events = sse((await post(s, body(stream=True))).text)
    assert [e for e, _ in events] == ["message_start", "message_delta", "message_stop"]
    m = await sdk(s).messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert m.content == [] and m.stop_reason == "end_turn"


def _machine(proto) -> Machine:
    return proto.machine(proto.validator.validate(body(stream=True)), MODEL, True)


SAMPLES = {
    "Started": Started(12, 2), "ReasoningDelta": ReasoningDelta("t"), "TextDelta": TextDelta("x"),
    "ToolCallStarted": ToolCallStarted(0, "call_1", "f"), "ToolCallArgsDelta": ToolCallArgsDelta(0, "{}"),
    "ToolCallDone": ToolCallDone(0, "{}"), "KeepAlive": KeepAlive(1.0),
    "Finished": Finished("stop", Usage(12, 2, 5, 1)), "Failed": Failed("boom"),
}
# how to reach each state from the start
PATHS = {"start": [], "waiting": ["KeepAlive"], "idle": ["Started"], "thinking": ["Started", "ReasoningDelta"],
         "text": ["Started", "TextDelta"], "tool": ["Started", "ToolCallStarted"],
         "end": ["Started", "Finished"]}


def test_every_transition_of_the_table_and_nothing_else(demo_tok):
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    proto = AnthropicMessages()
    table = proto.spec.stream["states"]
    assert set(PATHS) == set(table)
    exercised = set()
    for state, ev_name in itertools.product(table, SAMPLES):
        m = _machine(proto)
        for step in PATHS[state]:
            m.feed(SAMPLES[step])
        assert m.state == state
        if ev_name in table[state]:
            wire = m.feed(SAMPLES[ev_name])
            assert m.state == table[state][ev_name].get("next", state)
            for w in wire:
                assert w.event == w.data["type"]
            exercised.add((state, ev_name))
        else:
            with pytest.raises(MachineError):
                m.feed(SAMPLES[ev_name])
    assert exercised == {(s, e) for s, row in table.items() for e in row}


def test_the_fold_is_the_stream(demo_tok):
    """The non-stream message is built from exactly the events a stream sends."""
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    proto = AnthropicMessages()
    v = proto.validator.validate(body())
    m = proto.machine(v, MODEL, False)
    seq = [KeepAlive(1.0), Started(30, 10), ReasoningDelta("a"), ReasoningDelta("b"), TextDelta("hi"),
           ToolCallStarted(0, "call_9", "f"), ToolCallArgsDelta(0, '{"k"'), ToolCallArgsDelta(0, ": 1}"),
           ToolCallDone(0), KeepAlive(2.0), Finished("tool_calls", Usage(30, 10, 7, 2))]
    wire = [w for ev in seq for w in m.feed(ev)]
    msg = proto.fold(wire, v)
    assert msg["content"] == [{"type": "thinking", "thinking": "ab", "signature": "tinytitan-unsigned"},
                              {"type": "text", "text": "hi"},
                              {"type": "tool_use", "id": "call_9", "name": "f", "input": {"k": 1}}]
    assert msg["stop_reason"] == "tool_use" and msg["stop_sequence"] is None
    assert msg["usage"] == {"input_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10,
                            "output_tokens": 7}
    assert msg["id"].startswith("msg_") and msg["type"] == "message" and msg["role"] == "assistant"


@pytest.fixture
def quick_ping_specs(tmp_path):
    """The spec files with a 50 ms keep-alive: what a maintainer would change in YAML."""
    for f in (ROOT / "spec").glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    p = tmp_path / "anthropic_messages.yaml"
    text = p.read_text()
    assert "keepalive_seconds: 10" in text
    p.write_text(text.replace("keepalive_seconds: 10", "keepalive_seconds: 0.05"))
    return tmp_path


async def test_ping_while_the_first_token_is_slow(serve, quick_ping_specs):
    s = await serve([{"output": "Slow answer.", "delay_ms": 120}], spec_dir=quick_ping_specs)
    events = sse((await post(s, body(stream=True))).text)
    names = [e for e, _ in events]
    assert names.index("ping") < names.index("content_block_start")  # pings keep the slow first token alive
    assert events[names.index("ping")][1] == {"type": "ping"}
    blocks = check_grammar(events)
    assert blocks[0]["text"] == "Slow answer."
    async with sdk(s).messages.stream(model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "hi"}]) as st:
        final = await st.get_final_message()
    assert final.content[0].text == "Slow answer."


async def test_ping_while_waiting_in_the_queue(serve, quick_ping_specs):
    s = await serve([{"output": "first " * 6, "delay_ms": 60}, "second"], spec_dir=quick_ping_specs)
    results = {}

    async def run(key, payload):
        results[key] = await post(s, payload)

    async with trio.open_nursery() as n:
        n.start_soon(run, "a", body(stream=True))
        with trio.fail_after(5):
            while not s.engine.running:
                await trio.sleep(0.005)
        n.start_soon(run, "b", body(stream=True))
    events = sse(results["b"].text)
    names = [e for e, _ in events]
    # the waiting stream opens at once: message_start (with the prompt count), then pings until its turn
    assert names[:2] == ["message_start", "ping"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == events[-2][1]["usage"]["input_tokens"] > 0
    assert check_grammar(events)[0]["text"] == "second"
    assert check_grammar(sse(results["a"].text))[0]["text"].startswith("first")


async def test_a_client_hanging_up_cancels_the_generation(serve):
    s = await serve([{"output": "word " * 300, "delay_ms": 30}])
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream("POST", s.url("/v1/messages"), json=body(stream=True), headers=HEADERS) as r:
            lines = r.aiter_lines()
            async for line in lines:
                if line.startswith("event: content_block_delta"):
                    break
            assert s.engine.running == 1
    with trio.fail_after(5):  # the client hung up (the answer would take 9 s more)
        while s.engine.running or s.engine.waiting:
            await trio.sleep(0.01)


async def test_the_demo_model_streams_a_well_formed_message(serve, demo_backend):
    """Real decoding (random weights, gibberish): whatever the model emits, the grammar holds."""
    s = await serve(backend=demo_backend)
    model = demo_backend.model_id
    for thinking in ({"type": "disabled"}, {"type": "adaptive"}):
        events = sse((await post(s, body(model=model, stream=True, max_tokens=64, thinking=thinking,
                                          tools=[{"name": "f", "input_schema": {"type": "object"}}]))).text)
        check_grammar(events)
    m = await sdk(s).messages.create(model=model, max_tokens=12, messages=[{"role": "user", "content": "hi"}],
                                     extra_body={"top_k": 10**9})  # past the vocabulary: every token stays, no failure
    assert m.stop_reason in ("max_tokens", "end_turn", "tool_use") and m.usage.output_tokens <= 12
