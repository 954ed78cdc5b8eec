"""A stop string that ends a turn after its tool calls are complete ends a turn that called tools: Messages says
``tool_use`` (the SDK's tool runner reads ``stop_sequence`` as a final answer whose tool_use blocks "must not be
executed", so the calls were lost), Chat ``tool_calls``. A stop string before any call is still the turn's end."""

from __future__ import annotations

import json

import httpx
import pytest

from protocol_folds import AH, FOLD

CALL = '<tool_call>\n{"name": "f", "arguments": {"q": "x"}}\n</tool_call>'
USER = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def asks(stop: str):
    return [("chat", "/v1/chat/completions",
             {"messages": USER, "stop": [stop], "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]}),
            ("messages", "/v1/messages",
             {"messages": USER, "stop_sequences": [stop], "max_tokens": 100, "tools": [{"name": "f", "input_schema": SCHEMA}]})]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_stop_string_after_complete_calls_ends_a_tool_turn(serve, stream):
    s = await serve([CALL + "\nDone. STOP and more"])
    async with httpx.AsyncClient(timeout=30) as c:
        for proto, path, body in asks("STOP"):
            r = await c.post(s.url(path), json={"model": "tinytitan-scripted", "stream": stream, **body}, headers=AH)
            told = FOLD[proto][stream](r.text)
            assert told.text == "Done. " and [n for n, _ in told.calls] == ["f"]
            if proto == "messages":
                assert (told.finish, told.stop_sequence) == ("tool_use", None)
                assert told.calls[0][1] == {"q": "x"}
            else:
                assert told.finish == "tool_calls" and json.loads(told.calls[0][1]) == {"q": "x"}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_stop_string_before_any_call_still_ends_the_turn_there(serve, stream):
    s = await serve(["Let me STOP" + CALL])
    async with httpx.AsyncClient(timeout=30) as c:
        for proto, path, body in asks("STOP"):
            r = await c.post(s.url(path), json={"model": "tinytitan-scripted", "stream": stream, **body}, headers=AH)
            told = FOLD[proto][stream](r.text)
            assert told.text == "Let me " and not told.calls
            assert (told.finish, told.stop_sequence) == (("stop_sequence", "STOP") if proto == "messages" else ("stop", None))
