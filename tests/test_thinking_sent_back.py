"""Thinking an agent sends back is its turn's reasoning on every protocol, rendered where the model's template
puts it (the demo model's Qwen3 template keeps the current tool loop's), so the loop's next turn reads the
answer as it was generated: Anthropic ``thinking`` blocks, Responses ``reasoning`` items and Chat's
``reasoning_content`` give one prompt. ``clear_thinking_20251015`` clears all but the ``keep`` most recent
turns' thinking, and says so."""

from __future__ import annotations

import json

import httpx
import pytest

import strict
from anthropic_util import HEADERS
from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}}}
FN = {"type": "function", "name": "get_weather", "description": "Weather",
      "parameters": TOOL["input_schema"]}
THOUGHTS = ("I should look up Rome.", "Now Paris.")


def messages_body(**extra) -> dict:
    def turn(i: int, city: str) -> list[dict]:
        return [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": THOUGHTS[i], "signature": "sig"},
                {"type": "tool_use", "id": f"call_{i}", "name": "get_weather", "input": {"city": city}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"call_{i}", "content": "sunny"}]}]
    return {"model": MODEL, "max_tokens": 50, "tools": [TOOL],
            "messages": [{"role": "user", "content": "Weather in Rome, then Paris?"}] + turn(0, "Rome")
            + turn(1, "Paris"), **extra}


def responses_body() -> dict:
    items = [{"role": "user", "content": "Weather in Rome, then Paris?"}]
    for i, city in enumerate(("Rome", "Paris")):
        items += [{"type": "reasoning", "id": f"rs_{i}", "summary": [],
                   "content": [{"type": "reasoning_text", "text": THOUGHTS[i]}]},
                  {"type": "function_call", "call_id": f"call_{i}", "name": "get_weather",
                   "arguments": f'{{"city": "{city}"}}'},
                  {"type": "function_call_output", "call_id": f"call_{i}", "output": "sunny"}]
    return {"model": MODEL, "input": items, "tools": [FN]}


def chat_body() -> dict:
    msgs = [{"role": "user", "content": "Weather in Rome, then Paris?"}]
    for i, city in enumerate(("Rome", "Paris")):
        msgs += [{"role": "assistant", "content": None, "reasoning_content": THOUGHTS[i], "tool_calls": [
                     {"id": f"call_{i}", "type": "function",
                      "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}]},
                 {"role": "tool", "tool_call_id": f"call_{i}", "content": "sunny"}]
    return {"model": MODEL, "messages": msgs, "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather", "parameters": TOOL["input_schema"]}}]}


@pytest.fixture
async def recorded(serve, demo_tok):
    backend = Recording([ScriptEntry("Done.")] * 8, demo_tok, model_id=MODEL)
    return backend, await serve(backend=backend)


async def test_every_protocol_renders_the_thinking_sent_back(recorded):
    backend, s = recorded
    async with httpx.AsyncClient(timeout=30) as c:
        m = await c.post(s.url("/v1/messages"), json=messages_body(), headers=HEADERS)
        r = await c.post(s.url("/v1/responses"), json=responses_body())
        o = await c.post(s.url("/v1/chat/completions"), json=chat_body())
    strict.message(m.json()), strict.response(r.json()), strict.chat_completion(o.json())
    for prompt in backend.prompts:
        assert all(f"<think>\n{t}\n</think>" in prompt for t in THOUGHTS), prompt
    # the same conversation is the same prompt (Messages' tool results and Chat's differ in nothing the model reads)
    assert backend.prompts[0] == backend.prompts[1] == backend.prompts[2]


async def test_clear_thinking_keeps_the_most_recent_turns(recorded):
    backend, s = recorded
    beta = {**HEADERS, "anthropic-beta": "context-management-2025-06-27"}
    async with httpx.AsyncClient(timeout=30) as c:
        kept = await c.post(s.url("/v1/messages"), headers=beta, json=messages_body(
            context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}))
        one = await c.post(s.url("/v1/messages"), headers=beta, json=messages_body(
            context_management={"edits": [{"type": "clear_thinking_20251015"}]}))
        counted = await c.post(s.url("/v1/messages/count_tokens"), headers=beta, json={
            k: v for k, v in messages_body(context_management={"edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}]}).items()
            if k != "max_tokens"})
        bad = await c.post(s.url("/v1/messages"), headers=beta, json=messages_body(
            context_management={"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "turns"}}]}))
    assert strict.message(kept.json()).context_management.applied_edits == []
    assert all(t in backend.prompts[0] for t in THOUGHTS)
    edits = strict.message(one.json()).context_management.applied_edits
    assert len(edits) == 1 and edits[0].type == "clear_thinking_20251015" and edits[0].cleared_thinking_turns == 1
    assert edits[0].cleared_input_tokens > 0
    assert THOUGHTS[0] not in backend.prompts[1] and THOUGHTS[1] in backend.prompts[1]
    count = counted.json()
    assert counted.status_code == 200 and count["input_tokens"] < count["context_management"][
        "original_input_tokens"], count
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith(
        "'context_management.edits[0].keep' must be an object whose type is one of thinking_turns"), bad.text


async def test_a_reasoning_item_with_a_bad_summary_is_refused_by_path(recorded):
    _, s = recorded
    body = responses_body()
    body["input"][1]["summary"] = "not a list"
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[1].summary", r.text


async def test_a_reasoning_item_carries_its_thought_as_encrypted_content_where_asked(serve, demo_tok):
    """A client that keeps no state (store: false) and sends back only what it was given asks for
    ``include: ["reasoning.encrypted_content"]`` (the AI SDK and Codex do): the reasoning item carries the thought
    there too, streamed and not, and an item sent back with nothing else renders it."""
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry("<think>Rome first.</think>Done.")] * 4, demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    ask = {"model": MODEL, "input": "Weather in Rome?", "store": False, "include": ["reasoning.encrypted_content"]}
    async with httpx.AsyncClient(timeout=30) as c:
        plain = await c.post(s.url("/v1/responses"), json={**ask, "include": []})
        r = await c.post(s.url("/v1/responses"), json=ask)
        body = strict.response(r.json())
        (item,) = [o for o in body.output if o.type == "reasoning"]
        assert item.encrypted_content and "Rome first." not in item.encrypted_content  # (base64 of its payload)
        assert [o for o in strict.response(plain.json()).output if o.type == "reasoning"][0].encrypted_content is None
        streamed = await c.post(s.url("/v1/responses"), json={**ask, "stream": True})
        done = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")
                and '"response.output_item.done"' in line]
        assert [d["item"]["encrypted_content"] for d in done if d["item"]["type"] == "reasoning"] == [
            item.encrypted_content]  # the same thought, the same payload
        sent_back = {"type": "reasoning", "id": item.id, "summary": [], "encrypted_content": item.encrypted_content}
        follow = await c.post(s.url("/v1/responses"), json={**ask, "input": [
            {"role": "user", "content": "Weather in Rome?"}, sent_back,
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"}], "tools": [FN]})
        foreign = await c.post(s.url("/v1/responses"), json={**ask, "input": [
            {"role": "user", "content": "hi"}, {**sent_back, "encrypted_content": "gAAAAABopaque"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]})
    assert follow.status_code == 200 and "<think>\nRome first.\n</think>" in backend.prompts[-2], backend.prompts[-2]
    assert foreign.status_code == 200  # another server's opaque thought: nothing to read, no error
