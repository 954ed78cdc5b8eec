"""/health (and /) without the key: their status for GET and HEAD only; another method is 405, an upgrade 426,
as with the key."""

from __future__ import annotations

import httpx
import pytest

from rawhttp import RawConnection


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_health_answers_a_wrong_method_405_with_or_without_the_key(serve, method):
    """/health without the key answers its status only, but for GET (and HEAD) alone: any other method is
    the router's 405, as with the key and as on / (guard.py)."""
    s = await serve(["ok"], api_key="k")
    async with httpx.AsyncClient(timeout=30) as c:
        keyed = await c.request(method, s.url("/health"), headers={"authorization": "Bearer k"})
        bare = await c.request(method, s.url("/health"))
        got = await c.get(s.url("/health"))
    assert keyed.status_code == 405, keyed.text
    assert bare.status_code == 405, bare.text
    assert got.status_code == 200 and got.json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/health", "/"])
async def test_an_upgrade_on_an_open_path_is_426_without_the_key_too(serve, path):
    """A WebSocket upgrade on / or /health without the key was answered 200 with the keyless status body
    (the key's own answer is 426: no WebSocket there)."""
    s = await serve(["ok"], api_key="k")
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        await conn.send("GET", path, headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                              "Sec-WebSocket-Version": "13"})
        status, _, raw = await conn.response()
    assert status == 426, raw
