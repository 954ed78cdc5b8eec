"""A custom tool's call whose complete arguments are not ``{"input": string}`` (a model that named the one
parameter otherwise, or wrote the input bare) is taken as the input itself (custom_tools.input_of), never
an empty input that drops what the model wrote."""

from __future__ import annotations

import json

import pytest

from responses_helpers import post, sse_events

M = "tinytitan-scripted"
TOOL = {"type": "custom", "name": "run", "description": "Run code."}
CASES = [({"code": "print(1)"}, '{"code": "print(1)"}'), ("print(1)", "print(1)"), ({"input": 5}, '{"input": 5}'),
         ({}, "")]


def call_text(arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": "run", "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.parametrize("arguments,expected", CASES)
async def test_other_shapes_are_the_input(serve, arguments, expected):
    s = await serve([call_text(arguments)] * 3)
    r = await post(s, "/v1/responses", {"model": M, "input": "x", "tools": [TOOL], "store": False})
    (item,) = r.json()["output"]
    assert item["type"] == "custom_tool_call" and item["input"] == expected
    r = await post(s, "/v1/chat/completions", {"model": M, "messages": [{"role": "user", "content": "x"}],
                                               "tools": [{"type": "custom", "custom": {"name": "run"}}]})
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["custom"]["input"] == expected
    events = await sse_events(s, {"model": M, "input": "x", "tools": [TOOL], "stream": True, "store": False})
    deltas = "".join(d["delta"] for n, d in events if n == "response.custom_tool_call_input.delta")
    (done,) = [d for n, d in events if n == "response.custom_tool_call_input.done"]
    assert deltas == done["input"] == expected
