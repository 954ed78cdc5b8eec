"""A custom tool's input the model wrote bare (harmony hands the message body on as the arguments) that opens with
a quote or a brace: its input is what the model wrote, on Responses and Chat alike, and the streamed deltas join
to it (custom_tools.input_of holds such text back until the call is whole, then sends it as the last delta)."""

from __future__ import annotations

import json

import httpx
import pytest

import family_fixtures as ff
from responses_helpers import post, sse_events
from tinytitan import custom_tools

TOOL = {"type": "custom", "name": "run", "description": "Run Python."}
CODES = ['"hello".upper()', "{x: 1} if ok else None"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("bare-input")


@pytest.mark.parametrize("code", CODES)
async def test_bare_input_opening_with_a_quote_or_a_brace_is_kept(serve, root, code):
    out = f"<|channel|>commentary to=functions.run<|message|>{code}<|call|>"
    b = ff.backend("gpt_oss", root, [out] * 4)
    s = await serve(backend=b)
    r = await post(s, "/v1/responses", {"model": b.model_id, "input": "x", "tools": [TOOL], "store": False})
    assert r.status_code == 200, r.text
    (item,) = [o for o in r.json()["output"] if o["type"] == "custom_tool_call"]
    assert item["input"] == code, item
    events = await sse_events(s, {"model": b.model_id, "input": "x", "tools": [TOOL], "stream": True,
                                  "store": False})
    deltas = "".join(d["delta"] for n, d in events if n == "response.custom_tool_call_input.delta")
    (done,) = [d for n, d in events if n == "response.custom_tool_call_input.done"]
    assert deltas == done["input"] == code, (deltas, done)
    chat = {"model": b.model_id, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "custom", "custom": {"name": "run", "description": "Run Python."}}]}
    async with httpx.AsyncClient(timeout=30) as c:
        folded = (await c.post(s.url("/v1/chat/completions"), json=chat)).json()
        streamed = await c.post(s.url("/v1/chat/completions"), json={**chat, "stream": True})
    assert folded["choices"][0]["message"]["tool_calls"][0]["custom"]["input"] == code, folded
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    joined = "".join(tc.get("custom", {}).get("input", "") for ch in chunks for choice in ch["choices"]
                     for tc in choice["delta"].get("tool_calls") or ())
    assert joined == code, chunks


@pytest.mark.parametrize("arguments", ['{"input": "a\\\\\\\\b"}', '"hello".upper()', 'plain text', '{"code": 1}',
                                       '"just a string"', '{"input": "cut sh'])
def test_every_reading_extends_the_last_and_the_whole_is_the_done_reading(arguments):
    readings = [custom_tools.input_of(arguments[:n]) for n in range(len(arguments) + 1)]
    final = custom_tools.input_of(arguments, done=True)
    assert all(b.startswith(a) for a, b in zip(readings, readings[1:] + [final])), (readings, final)
