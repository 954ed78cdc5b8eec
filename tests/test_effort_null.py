"""Messages ``output_config.effort: null`` is unset, as the SDK types it (``Optional[Literal[...]]``): the server's
default, not a 400."""

from __future__ import annotations

import httpx

from anthropic_util import HEADERS


async def test_a_null_effort_is_unset(serve):
    s = await serve(script=["ok"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/messages"), headers=HEADERS, json={
            "model": "tinytitan-scripted", "max_tokens": 50, "output_config": {"effort": None},
            "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
