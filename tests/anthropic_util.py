"""Helpers shared by the Anthropic Messages tests (raw HTTP, SSE parsing, the SDK client)."""

from __future__ import annotations

import json

import anthropic
import httpx

from sse import parse_sse

MODEL = "tinytitan-scripted"
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "x", "content-type": "application/json"}


def sdk(s, **kw) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0, **kw)


async def message(c: anthropic.AsyncAnthropic, stream: bool, **kw) -> anthropic.types.Message:
    """One Messages answer through the SDK: streamed (every event read, then its final message) or not."""
    if not stream:
        return await c.messages.create(**kw)
    async with c.messages.stream(**kw) as st:
        async for _ in st:
            pass
        return await st.get_final_message()


def protocol(s):
    """The Messages protocol of a running test server (``serve``'s)."""
    return s.server.protocols["anthropic_messages"]


def chat_request(s, payload: dict):
    proto = protocol(s)
    return s.engine.apply_model(proto.chat_request(proto.validator.validate(payload)))


def rendered(s, payload: dict) -> str:
    """The prompt text a Messages body renders to on the server's backend."""
    return s.engine.backend.render(chat_request(s, payload))


def body(**fields) -> dict:
    out = {"model": MODEL, "max_tokens": 256, "messages": [{"role": "user", "content": "hi"}]}
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


async def post(s, payload, path: str = "/v1/messages", headers: dict | None = None) -> httpx.Response:
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    async with httpx.AsyncClient(timeout=30) as c:
        return await c.post(s.url(path), content=data, headers={**HEADERS, **(headers or {})})


sse = parse_sse  # one SSE reader for every protocol


def assert_envelope(resp: httpx.Response, status: int, type_: str, *needles: str) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers.get("request-id", "").startswith("req_"), dict(resp.headers)
    d = resp.json()
    assert set(d) == {"type", "error", "request_id"} and d["type"] == "error", d
    assert d["request_id"] == resp.headers["request-id"], d  # the body carries the header's id, as the API's does
    assert set(d["error"]) == {"type", "message"}, d
    assert d["error"]["type"] == type_, d
    for n in needles:
        assert n in d["error"]["message"], (n, d["error"]["message"])
    return d
