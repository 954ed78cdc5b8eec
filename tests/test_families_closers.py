"""A closing marker inside a quoted argument value is part of the value, in every family's call format.

A model writing about its own call format produces e.g. ``{"name": "write", "arguments": {"path":
"notes.md", "content": "calls look like <tool_call>{...}</tool_call> in raw output"}}``: cutting the call
at that ``</tool_call>`` gave Chat clients cut arguments and leaked text, a Responses call marked incomplete
and Messages ``{}`` (pi wrote a truncated file; opencode reported "Invalid Tool").
"""

from __future__ import annotations

import json

import pytest

from tinytitan import events as ev
from tinytitan.engine.families import FAMILIES

WRITE = {"write_file": {"type": "object", "properties": {"path": {"type": "string"},
                                                         "content": {"type": "string"}}}}

# family: (raw output with the family's own closer, and its opener, inside a string argument, the arguments)
CASES = {
    "qwen": ('Writing.\n<tool_call>\n{"name": "write_file", "arguments": {"path": "notes.md", "content": '
             '"calls look like <tool_call>{\\"name\\": \\"x\\"}</tool_call> in raw output"}}\n</tool_call>',
             {"path": "notes.md", "content": 'calls look like <tool_call>{"name": "x"}</tool_call> in raw output'}),
    "qwen3_coder": ("<tool_call>\n<function=write_file>\n<parameter=path>\nnotes.md\n</parameter>\n"
                    "<parameter=content>\nsee <tool_call><function=f></function></tool_call> here\n"
                    "</parameter>\n</function>\n</tool_call>",
                    {"path": "notes.md", "content": "see <tool_call><function=f></function></tool_call> here"}),
    "glm": ("<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.md</arg_value>\n<arg_key>content"
            "</arg_key>\n<arg_value>raw: <tool_call>f</tool_call> end</arg_value>\n</tool_call>",
            {"path": "a.md", "content": "raw: <tool_call>f</tool_call> end"}),
    "llama3": ('<|python_tag|>{"name": "write_file", "parameters": {"content": "a <|python_tag|>{} b"}}',
               {"content": "a <|python_tag|>{} b"}),
    "mistral": ('[TOOL_CALLS]write_file[ARGS]{"content": "x [TOOL_CALLS]f[ARGS]{} y"}',
                {"content": "x [TOOL_CALLS]f[ARGS]{} y"}),
    "gemma": ('```tool_code\nwrite_file(path="a.md", content="fence: ```tool_code\\nf()\\n``` done")\n```',
              {"path": "a.md", "content": "fence: ```tool_code\nf()\n``` done"}),
    "gemma4": ('<|tool_call>call:write_file{content:<|"|>a <tool_call|> b<|"|>}<tool_call|>',
               {"content": "a <tool_call|> b"}),
    "function_gemma": ("<start_function_call>call:write_file{content:<escape>a <end_function_call> b<escape>}"
                       "<end_function_call>", {"content": "a <end_function_call> b"}),
}


def parse(family: str, raw: str, step: int) -> list:
    parser = FAMILIES[family].parser(False, {}, WRITE)
    out = []
    for i in range(0, len(raw), step):
        out += parser.feed(raw[i:i + step])[0]
    return out + parser.finish()


@pytest.mark.parametrize("step", [1, 7, 10_000])
@pytest.mark.parametrize("family", sorted(CASES))
def test_a_closer_inside_a_string_is_part_of_the_argument(family, step):
    raw, args = CASES[family]
    events = parse(family, raw, step)
    calls = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [c.name for c in calls] == ["write_file"], events
    assert len(done) == 1 and done[0].complete, events
    assert json.loads(done[0].arguments) == args
    streamed = "".join(e.text for e in events if isinstance(e, ev.ToolCallArgsDelta))
    assert streamed == done[0].arguments
    text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
    assert text in ("", "Writing."), text  # nothing of the call leaks as text


@pytest.mark.parametrize("family", ["qwen", "glm", "mistral"])
def test_the_closer_after_the_value_still_ends_the_call(family):
    """Outside a string the closer ends the call as before: the text after it is text."""
    raw = {"qwen": '<tool_call>{"name": "write_file", "arguments": {"content": "a\\"b"}}</tool_call> after',
           "glm": "<tool_call>write_file<arg_key>content</arg_key><arg_value>a\"b</arg_value></tool_call> after",
           "mistral": '[TOOL_CALLS]write_file[ARGS]{"content": "a\\"b"}[TOOL_CALLS]write_file[ARGS]{}'}[family]
    events = parse(family, raw, 3)
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert json.loads(done[0].arguments) == {"content": 'a"b'}
    if family == "mistral":
        assert len(done) == 2
    else:
        assert "".join(e.text for e in events if isinstance(e, ev.TextDelta)) == "after"


async def test_the_three_apis_get_the_whole_call(serve):
    """The reported case end to end: Chat's arguments whole (no text leaked), the Responses call completed,
    Messages' input the full object — streaming and not."""
    import httpx

    from sse import parse_sse

    content = "calls look like <tool_call>{...}</tool_call> in raw output"
    raw = ('<tool_call>\n{"name": "write", "arguments": {"path": "notes.md", "content": '
           + json.dumps(content) + '}}\n</tool_call>')
    s = await serve([raw])
    want = {"path": "notes.md", "content": content}
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}
    user = [{"role": "user", "content": "write it"}]
    async with httpx.AsyncClient(timeout=30) as c:
        for stream in (False, True):
            r = await c.post(s.url("/v1/chat/completions"), json={
                "model": "tinytitan-scripted", "messages": user, "stream": stream,
                "tools": [{"type": "function", "function": {"name": "write", "parameters": schema}}]})
            if stream:
                deltas = [d["choices"][0]["delta"] for _, d in parse_sse(r.text) if d != "[DONE]" and d["choices"]]
                args = "".join(tc["function"].get("arguments", "") for d in deltas for tc in d.get("tool_calls") or [])
                assert not "".join(d.get("content") or "" for d in deltas)
            else:
                msg = r.json()["choices"][0]["message"]
                args = msg["tool_calls"][0]["function"]["arguments"]
                assert not msg["content"]
            assert json.loads(args) == want
            r = await c.post(s.url("/v1/responses"), json={
                "model": "tinytitan-scripted", "input": "write it", "stream": stream,
                "tools": [{"type": "function", "name": "write", "parameters": schema}]})
            obj = ([d for _, d in parse_sse(r.text) if d["type"] == "response.completed"][0]["response"]
                   if stream else r.json())
            (item,) = obj["output"]
            assert item["type"] == "function_call" and item["status"] == "completed"
            assert json.loads(item["arguments"]) == want and obj["status"] == "completed"
            r = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"}, json={
                "model": "tinytitan-scripted", "max_tokens": 500, "messages": user, "stream": stream,
                "tools": [{"name": "write", "input_schema": schema}]})
            if stream:
                events = [d for _, d in parse_sse(r.text)]
                tool = "".join(d["delta"]["partial_json"] for d in events if d["type"] == "content_block_delta"
                               and d["delta"]["type"] == "input_json_delta")
                assert json.loads(tool) == want
            else:
                (block,) = r.json()["content"]
                assert block["type"] == "tool_use" and block["input"] == want
