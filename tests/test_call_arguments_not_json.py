"""A model's call arguments that Python's json reads but no strict parser does (NaN, Infinity, 1e400) were parsed
and written into the answer as bare NaN / Infinity, making the Anthropic and Ollama answers not JSON."""

from __future__ import annotations

import json

import httpx
import pytest


def _strict_json(text: str):
    """A body as a strict JSON parser reads it (JavaScript's JSON.parse, Go's encoding/json, serde_json)."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


TOOL_OUT = '<tool_call>\n{"name": "get_weather", "arguments": {"x": NaN, "y": 1e400}}\n</tool_call>'


@pytest.mark.parametrize("path,body", [
    ("/v1/messages", {"model": "tinytitan-scripted", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
                      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}),
    ("/api/chat", {"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}),
])
@pytest.mark.parametrize("stream", [False, True])
async def test_model_arguments_that_are_not_json_never_make_the_answer_not_json(serve, path, body, stream):
    """A model's call arguments holding NaN / 1e400 (not JSON: Python's json reads them) were parsed, then
    written into the answer as bare NaN / Infinity: a body no strict JSON parser reads. They are arguments that
    are not a JSON object, sent as {} (as any other unparsable arguments are)."""
    s = await serve([TOOL_OUT])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json={**body, "stream": stream})
    assert r.status_code == 200, r.text
    if path == "/api/chat":
        lines = [_strict_json(line) for line in r.text.splitlines() if line.strip()]
        calls = [tc for d in lines for tc in d["message"].get("tool_calls") or []]
        assert [tc["function"]["arguments"] for tc in calls] == [{}]
    elif stream:
        datas = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        deltas = [_strict_json(d) for d in datas]
        partial = "".join(d["delta"]["partial_json"] for d in deltas
                          if d["type"] == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
        assert _strict_json(partial or "{}") == {}
    else:
        blocks = _strict_json(r.text)["content"]
        assert [b["input"] for b in blocks if b["type"] == "tool_use"] == [{}]
