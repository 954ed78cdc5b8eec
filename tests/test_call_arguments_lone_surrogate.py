"""A model's call arguments with a lone surrogate escape (``"a\\ud800b"``): Chat and Responses pass the arguments on
as the string the model wrote; Messages and Ollama send them as an object, re-encoded, which held ``\\ud800``, a
JSON text strict parsers (jiter in the SDKs, serde) refuse. The lone surrogate becomes U+FFFD there, as a request's
does."""

from __future__ import annotations

import httpx
import pytest

from sse import parse_sse

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
OUT = '<tool_call>\n{"name": "f", "arguments": {"q": "a\\ud800b"}}\n</tool_call>'
USER = [{"role": "user", "content": "hi"}]


def strict_json(text: str):
    from pydantic_core import from_json  # jiter: what the SDKs parse with

    return from_json(text)


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_and_ollama_send_valid_json(serve, stream):
    s = await serve(script=[OUT, OUT])
    async with httpx.AsyncClient(timeout=30) as c:
        m = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"}, json={
            "model": "tinytitan-scripted", "max_tokens": 100, "stream": stream, "messages": USER,
            "tools": [{"name": "f", "input_schema": SCHEMA}]})
        o = await c.post(s.url("/api/chat"), json={
            "model": "tinytitan-scripted", "stream": stream, "messages": USER,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]})
    assert m.status_code == o.status_code == 200
    if stream:
        lines = [line for line in o.text.splitlines() if line.strip()]
        calls = [call for line in lines for call in (strict_json(line)["message"].get("tool_calls") or [])]
        events = [data for _, data in parse_sse(m.text) if isinstance(data, dict)]
        parts = [e["delta"]["partial_json"] for e in events
                 if e.get("type") == "content_block_delta" and e["delta"]["type"] == "input_json_delta"]
        assert strict_json("".join(parts)) == {"q": "a\ufffdb"}, m.text  # (what the SDK accumulates and parses)
    else:
        assert strict_json(m.text)["content"][-1]["input"] == {"q": "a\ufffdb"}
        calls = strict_json(o.text)["message"]["tool_calls"]
    assert calls[0]["function"]["arguments"] == {"q": "a\ufffdb"}
