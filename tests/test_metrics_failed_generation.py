"""A generation that fails after it started still decoded tokens: /metrics counts them, as it counts those of a
generation the client hung up on (the prompt it read is counted already)."""

from __future__ import annotations

import httpx
import pytest

from observe_helpers import MODEL, eventually, scrape, tokens

SCRIPT = {"output": "One two three four five six.", "error": "boom"}


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}),
    ("/v1/responses", {"model": MODEL, "input": "hi", "store": False}),
])
async def test_a_failed_generations_decoded_tokens_are_counted(serve, demo_tok, path, body):
    s = await serve([SCRIPT])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json=body)
    assert r.status_code == 200 and "boom" in r.text
    decoded = len(demo_tok.encode(SCRIPT["output"], add_special_tokens=False))

    async def counted():
        after = await scrape(s)
        return after if tokens(after, "prompt") > 0 else None

    after = await eventually(counted)
    assert after, "the request was not counted"
    assert tokens(after, "completion") == decoded
