"""A Responses stream cut short (the client hangs up, the server stops it) once ``response.created`` gave its id:
with ``store`` it is kept as an ``incomplete`` response, what was generated so far its output, so retrieving it
answers and a turn chained from it continues (Codex and the Agents SDK chain turns by that id)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import trio
from httpx_ws import aconnect_ws
from openai.types.responses import Response

from responses_helpers import LONG, MODEL, client, hang_up, record_prompts, stored
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "' + "Paris " * 200 + '"}}</tool_call>'
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


async def test_a_text_stream_the_client_left_is_kept_incomplete_and_chains(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20), ScriptEntry("Continued.")], demo_tok)
    s = await serve(backend=backend)
    prompts = record_prompts(s)
    rid = await hang_up(s, {"model": MODEL, "input": "tell me", "stream": True}, "response.output_text.delta")
    got = await stored(s, rid)
    Response.model_validate(got, strict=True)
    assert got["id"] == rid and got["status"] == "incomplete" and got["incomplete_details"] == {"reason": None}
    [item] = got["output"]
    text = item["content"][0]["text"]
    assert item["type"] == "message" and item["status"] == "incomplete"
    assert text and LONG.startswith(text) and text != LONG  # what was generated so far
    assert got["usage"]["input_tokens"] > 0 and got["usage"]["output_tokens"] > 0

    c = client(s)
    again = await c.responses.retrieve(rid)
    assert again.status == "incomplete" and again.output_text == text
    nxt = await c.responses.create(model=MODEL, input="go on", previous_response_id=rid)
    assert nxt.output_text == "Continued."
    assert [m.content for m in prompts[-1].req.messages] == ["tell me", text, "go on"]


async def test_a_call_cut_mid_way_is_kept_as_an_incomplete_call(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(CALL, delay_ms=20)], demo_tok)
    s = await serve(backend=backend)
    rid = await hang_up(s, {"model": MODEL, "input": "weather?", "tools": TOOLS, "stream": True},
                        "response.function_call_arguments.delta")
    got = await stored(s, rid)
    Response.model_validate(got, strict=True)
    [call] = got["output"]
    assert got["status"] == "incomplete" and call["type"] == "function_call" and call["status"] == "incomplete"
    assert call["name"] == "get_weather" and '"city"' in call["arguments"]


async def test_nothing_is_kept_without_store(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20)], demo_tok)
    s = await serve(backend=backend)
    rid = await hang_up(s, {"model": MODEL, "input": "x", "stream": True, "store": False},
                        "response.output_text.delta")
    with trio.fail_after(20):  # the request's record is made once its handling, a store's write included, is over
        while not [t for t in s.server.observer.recent() if t["path"] == "/v1/responses"]:
            await trio.sleep(0.02)
    with pytest.raises(openai.NotFoundError):
        await client(s).responses.retrieve(rid)


async def test_a_socket_closed_mid_response_keeps_it_for_http(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20)], demo_tok)
    s = await serve(backend=backend)
    rid, seen = None, 0
    async with httpx.AsyncClient() as h:
        async with aconnect_ws(s.url("/v1/responses"), h) as ws:
            await ws.send_text(json.dumps({"type": "response.create", "model": MODEL, "input": "x", "store": True}))
            while seen < 3:
                data = json.loads(await ws.receive_text())
                rid = rid or data["response"]["id"]
                seen += data["type"] == "response.output_text.delta"
    got = await stored(s, rid)
    assert got["status"] == "incomplete" and LONG.startswith(got["output"][0]["content"][0]["text"])
