"""Cache diagnostics relative to a named earlier response, on both wires: Messages'
``diagnostics.previous_message_id`` (``cache_miss_reason``) and Responses' ``prompt_cache_options.
comparison_response_id`` (``prompt_cache_diagnostics``), each validated strictly with its SDK's types."""

from __future__ import annotations

import anthropic
import httpx
import openai

from anthropic_util import HEADERS, MODEL
from conftest import entries
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.backends.scripted import ScriptedBackend

SYSTEM = "You are a careful assistant. " * 40
BETA = {"anthropic-beta": "cache-diagnosis-2026-04-07"}


async def cached_server(serve, demo_tok):
    return await serve(backend=ScriptedBackend(entries(["An answer."]), demo_tok, prompt_cache=PromptCache(1 << 30)))


async def test_messages_diagnostics_are_relative_to_previous_message_id(serve, demo_tok):
    s = await cached_server(serve, demo_tok)
    turn1 = [{"role": "user", "content": "first question " * 20}]

    async def post(messages, system=SYSTEM, diagnostics=None, headers=None):
        body = {"model": MODEL, "max_tokens": 20, "system": system, "messages": messages}
        if diagnostics is not None:
            body["diagnostics"] = diagnostics
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(s.url("/v1/messages"), json=body, headers={**HEADERS, **(headers or {})})
        assert r.status_code == 200, r.text
        anthropic.types.Message.model_validate(r.json(), strict=True)
        return r.json()

    first = await post(turn1, diagnostics={"previous_message_id": None})  # opted in, nothing to compare with
    assert first["diagnostics"] == {"cache_miss_reason": {"type": "previous_message_not_found"}}
    turn2 = turn1 + [{"role": "assistant", "content": "An answer."}, {"role": "user", "content": "and then?"}]
    second = await post(turn2, diagnostics={"previous_message_id": first["id"]})
    assert second.get("diagnostics") is None  # it only appended to the first prompt
    unknown = await post(turn2, diagnostics={"previous_message_id": "msg_0123456789abcdef01234567"})
    assert unknown["diagnostics"] == {"cache_miss_reason": {"type": "previous_message_not_found"}}
    # the first turn edited, compared with the second message: messages_changed, although the cache holds the
    # first prompt whole (a longest-prefix diagnosis would find the system prompt intact, and nothing lost)
    edited = [{"role": "user", "content": "first question " * 19 + "edited"}] + turn2[1:]
    third = await post(edited, diagnostics={"previous_message_id": second["id"]})
    reason = third["diagnostics"]["cache_miss_reason"]
    assert reason["type"] == "messages_changed" and reason["cache_missed_input_tokens"] > 0
    other_system = await post(turn2, system=SYSTEM + "Now.", diagnostics={"previous_message_id": second["id"]})
    assert other_system["diagnostics"]["cache_miss_reason"]["type"] == "system_changed"
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/messages"), headers=HEADERS,
                         json={"model": MODEL, "max_tokens": 5, "messages": turn1, "diagnostics": {"previous_message_id": 7}})
    assert r.status_code == 400 and "previous_message_id" in r.text


async def test_responses_prompt_cache_diagnostics_against_comparison_response_id(serve, demo_tok):
    s = await cached_server(serve, demo_tok)
    client = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
    first = await client.responses.create(model=MODEL, instructions=SYSTEM, input="first question " * 20)
    assert first.prompt_cache_diagnostics is None and first.prompt_cache_options is None

    def create(**kw):
        return client.responses.create(model=MODEL, instructions=SYSTEM, **kw)

    chained = [{"role": "user", "content": "first question " * 20},
               {"role": "assistant", "content": "An answer."}, {"role": "user", "content": "and then?"}]
    second = await create(input=chained, prompt_cache_options={"comparison_response_id": first.id})
    assert second.prompt_cache_diagnostics.type == "cache_hit"
    assert second.prompt_cache_options.comparison_response_id == first.id
    assert (second.prompt_cache_options.mode, second.prompt_cache_options.ttl) == ("implicit", "30m")
    gone = await create(input=chained, prompt_cache_options={"comparison_response_id": "resp_unknown"})
    assert gone.prompt_cache_diagnostics.type == "comparison_response_not_found"
    edited = [{"role": "user", "content": "first question " * 19 + "edited"}] + chained[1:]
    third = await create(input=edited, prompt_cache_options={"comparison_response_id": second.id})
    d = third.prompt_cache_diagnostics
    assert d.type == "cache_miss" and d.reason == "input_changed" and d.cache_missed_tokens > 0
    assert 0 < d.comparison_reusable_tokens < third.usage.input_tokens
    tools = [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}]
    fourth = await create(input=edited, tools=tools, prompt_cache_options={"comparison_response_id": third.id})
    assert fourth.prompt_cache_diagnostics.type == "cache_miss" and fourth.prompt_cache_diagnostics.reason == "tools_changed"
    # streamed: the terminal event carries it too
    async with await create(input=edited, stream=True, tools=tools,
                            prompt_cache_options={"comparison_response_id": fourth.id}) as stream:
        events = [e async for e in stream]
    assert events[-1].type == "response.completed"
    assert events[-1].response.prompt_cache_diagnostics.type == "cache_hit"
    try:
        await create(input="x", prompt_cache_options={"comparison_response_id": first.id, "bogus": 1})
        raise AssertionError("an unknown prompt_cache_options field was accepted")
    except openai.BadRequestError as exc:
        assert "bogus" in str(exc)
