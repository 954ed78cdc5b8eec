"""A 405 says which methods the path takes, in ``Allow`` (RFC 9110 §15.5.6: an origin server MUST send it), in
every protocol's envelope."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize("method,path,allow", [
    ("GET", "/v1/chat/completions", "POST"),
    ("PUT", "/v1/messages", "POST"),
    ("GET", "/api/chat", "POST"),
    ("POST", "/v1/models", "GET, HEAD"),
    ("POST", "/api/tags", "GET, HEAD"),
    ("POST", "/", "GET, HEAD"),
    # the Responses path takes POST, and GET as a WebSocket upgrade: a plain GET, a HEAD or a PUT there is told
    # so alike (the HEAD werkzeug adds beside a GET is refused on a WebSocket's path, so it is not offered)
    ("GET", "/v1/responses", "GET, POST"),
    ("HEAD", "/v1/responses", "GET, POST"),
    ("PUT", "/v1/responses", "GET, POST"),
    ("PUT", "/v1/responses/resp_1", "DELETE, GET, HEAD"),
])
async def test_a_405_carries_allow(serve, method, path, allow):
    s = await serve(["ok"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.request(method, s.url(path))
    assert r.status_code == 405, r.text
    assert r.headers.get("allow") == allow, dict(r.headers)
