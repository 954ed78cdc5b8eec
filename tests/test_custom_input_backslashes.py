"""A custom tool's input streams as it is read out of the arguments the model writes (custom_tools.input_of).
An input holding two backslashes in a row (a UNC path, a "\\n" in code, a regex) is written ``\\\\\\\\`` in the
JSON arguments; cut after the third backslash, the input read so far must still be what it was, never
empty — else the next delta repeats the whole input, and a client that joins the deltas (the Chat stream's
accumulator, Codex's custom_tool_call_input.delta) holds it twice."""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI

from responses_helpers import sse_events
from tinytitan.custom_tools import input_of

M = "tinytitan-scripted"
TOOL = {"type": "custom", "name": "run", "description": "Run code."}
CHAT_TOOL = {"type": "custom", "custom": {"name": "run", "description": "Run code."}}
INPUTS = ['print("a\\\\nb")', r"dir \\server\share", 'x\\\\\\"y', 'say "hi"\\\\', 'js: "\\u00e9" \\\\\\u12 😀']


def call_text(tool_input: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "run", "arguments": {"input": tool_input}}) + "\n</tool_call>"


@pytest.mark.parametrize("tool_input", INPUTS)
@pytest.mark.parametrize("ascii_only", [True, False])
def test_the_input_read_so_far_only_grows(tool_input, ascii_only):
    arguments = json.dumps({"input": tool_input}, ensure_ascii=ascii_only)
    before = ""
    for end in range(len(arguments) + 1):
        now = input_of(arguments[:end])
        assert now.startswith(before), (arguments[:end], before, now)
        before = now
    assert before == tool_input


@pytest.mark.parametrize("tool_input", INPUTS[:2])
async def test_streamed_custom_input_deltas_join_to_the_input(serve, tool_input):
    # a model's pace (60 ms a token): each token's delta reaches the machine on its own
    s = await serve([{"output": call_text(tool_input), "delay_ms": 60}] * 2)
    events = await sse_events(s, {"model": M, "input": "x", "tools": [TOOL], "stream": True, "store": False})
    deltas = "".join(d["delta"] for n, d in events if n == "response.custom_tool_call_input.delta")
    (done,) = [d for n, d in events if n == "response.custom_tool_call_input.done"]
    assert done["input"] == tool_input
    assert deltas == tool_input

    oa = AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
    streamed = ""
    async for chunk in await oa.chat.completions.create(model=M, messages=[{"role": "user", "content": "x"}],
                                                        tools=[CHAT_TOOL], stream=True):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            streamed += ((tc.model_extra or {}).get("custom") or {}).get("input") or ""
    assert streamed == tool_input
