"""Review findings on the Messages implementation: each test pins a behaviour a client relies on."""

from __future__ import annotations

import json
import re

from anthropic_util import MODEL, assert_envelope, body, post, sse
from backends import FailsToLoad
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry


async def test_a_prompt_over_the_context_window_reads_prompt_is_too_long(serve, demo_tok):
    # Claude Code recognises an over-long prompt only by Anthropic's wording ("prompt is too long: N tokens > M
    # maximum"): that message is what starts its reactive compaction; any other 400 is a dead end
    backend = ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=MODEL, context_window=400)
    s = await serve(backend=backend)
    for stream in (False, True):
        r = await post(s, body(stream=stream, messages=[{"role": "user", "content": "word " * 2000}]))
        d = assert_envelope(r, 400, "invalid_request_error", "context window")
        m = re.search(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", d["error"]["message"], re.I)
        assert m, d
        assert int(m.group(1)) > 400 and int(m.group(2)) == 400


async def test_a_failure_before_the_first_token_of_a_stream_is_an_error_event(serve, demo_tok):
    # the stream is open (200, text/event-stream) before the engine loads the model: a failure there must end
    # the stream with `event: error`, as a decoder failure does, not with a cut connection
    s = await serve(backend=FailsToLoad([ScriptEntry("ok")], demo_tok, model_id=MODEL))
    r = await post(s, body(stream=True))
    assert r.status_code == 200 and r.headers["request-id"].startswith("req_")
    events = sse(r.text)
    assert events and events[-1][0] == "error", r.text
    err = events[-1][1]
    assert err["type"] == "error" and err["error"]["type"] == "api_error" and "weights missing" in err["error"]["message"]
    assert "message_stop" not in [e for e, _ in events]
    assert_envelope(await post(s, body()), 500, "api_error", "weights missing")
    assert s.engine.running == 0 and s.engine.waiting == 0


TOOLS = [{"name": "read", "input_schema": {"type": "object"}}]


async def test_tool_input_is_an_object_in_the_stream_as_in_the_fold(serve):
    # a model that writes `"arguments": null` (or a list) for a call: the non-stream message says input {} (the
    # API's input is always an object), so the stream must not hand the SDK `null` / `[]` to accumulate
    from anthropic_util import sdk

    outs = ['<tool_call>\n{"name": "read", "arguments": null}\n</tool_call>',
            '<tool_call>\n{"name": "read", "arguments": []}\n</tool_call>',
            '<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>']
    s = await serve([o for o in outs for _ in range(3)])
    c = sdk(s)
    for expected in ({}, {}, {"path": "a.py"}):
        events = sse((await post(s, body(stream=True, tools=TOOLS))).text)
        partial = "".join(d["delta"]["partial_json"] for e, d in events
                          if e == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
        assert (json.loads(partial) if partial.strip() else {}) == expected, partial
        async with c.messages.stream(model=MODEL, max_tokens=100, tools=TOOLS,
                                     messages=[{"role": "user", "content": "x"}]) as st:
            streamed = await st.get_final_message()
        made = await c.messages.create(model=MODEL, max_tokens=100, tools=TOOLS,
                                       messages=[{"role": "user", "content": "x"}])
        assert streamed.content[0].input == made.content[0].input == expected
