"""A call the output cap cut short is ``{}`` on Messages, as on Ollama (protocols/common.arguments_object): even
where what was written so far reads as a JSON object — an XML-style family's parameters closed by the decoder,
or a JSON family's arguments object closed before the call's own closer."""

from __future__ import annotations

import httpx
import pytest

import family_fixtures as ff

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "q": {"type": "string"}}}
MINIMAX = ('</think>x<minimax:tool_call>\n<invoke name="f">\n<parameter name="q">hello world again</parameter>\n'
           '<parameter name="a">5</parameter>\n</invoke>\n</minimax:tool_call>')
QWEN = 'x <tool_call>\n{"name": "f", "arguments": {"a": 65}}\n</tool_call>'


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("cut-call")


@pytest.mark.parametrize("family, output, cut_after", [
    ("minimax_m2", MINIMAX, '<parameter name="q">hello'),  # inside a parameter's value
    ("minimax_m2", MINIMAX, "hello world again</parameter>\n"),  # between two parameters
    ("qwen", QWEN, '{"a": 65}'),  # the arguments closed, the call object not
])
async def test_a_cut_call_is_the_same_on_messages_and_ollama(serve, root, family, output, cut_after):
    tok, _ = ff.load(family, root)
    ids = tok.encode(output, add_special_tokens=False)
    cap = next(n for n in range(1, len(ids)) if tok.decode(ids[:n]).endswith(cut_after))
    b = ff.backend(family, root, [output] * 4)
    s = await serve(backend=b)
    msgs = [{"role": "user", "content": "hi"}]
    async with httpx.AsyncClient(timeout=30) as c:
        got = {}
        for stream in (False, True):
            m = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"},
                             json={"model": b.model_id, "max_tokens": cap, "messages": msgs, "stream": stream,
                                   "tools": [{"name": "f", "input_schema": SCHEMA}]})
            o = await c.post(s.url("/api/chat"), json={"model": b.model_id, "messages": msgs, "stream": stream,
                                                       "options": {"num_predict": cap},
                                                       "tools": [{"type": "function", "function": {
                                                           "name": "f", "parameters": SCHEMA}}]})
            if stream:
                import json as _json

                from sse import parse_sse

                inputs = [d["delta"]["partial_json"] for _, d in parse_sse(m.text)
                          if isinstance(d, dict) and d.get("type") == "content_block_delta"
                          and d["delta"]["type"] == "input_json_delta"]
                msg_input = _json.loads("".join(inputs)) if inputs else {}
                last = [_json.loads(x) for x in o.text.splitlines()]
                oll = [tc["function"]["arguments"] for x in last for tc in x["message"].get("tool_calls") or []]
            else:
                d = m.json()
                assert d["stop_reason"] == "max_tokens"
                msg_input = [b_["input"] for b_ in d["content"] if b_["type"] == "tool_use"][0]
                oll = [tc["function"]["arguments"] for tc in o.json()["message"]["tool_calls"]]
            got[stream] = (msg_input, oll)
    assert got[False] == got[True] == ({}, [{}])
