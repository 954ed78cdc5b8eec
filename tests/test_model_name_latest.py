"""``name:latest`` (what ``ollama list`` and /api/tags show) names the served model on every protocol, as Ollama's
own /v1 takes it; another tag is still an unknown model, in each protocol's envelope."""

from __future__ import annotations

import httpx

USER = [{"role": "user", "content": "hi"}]


async def test_an_ollama_name_with_its_latest_tag_is_served_on_every_protocol(serve):
    s = await serve(["a"] * 8, model_id="tiny")
    async with httpx.AsyncClient(timeout=30) as c:
        ollama = await c.post(s.url("/api/chat"), json={"model": "tiny:latest", "stream": False, "messages": USER})
        chat = await c.post(s.url("/v1/chat/completions"), json={"model": "tiny:latest", "messages": USER})
        fast = await c.post(s.url("/v1/chat/completions"), json={"model": "tiny-fast:latest", "messages": USER})
        msg = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"},
                           json={"model": "tiny:latest", "max_tokens": 5, "messages": USER})
        resp = await c.post(s.url("/v1/responses"), json={"model": "tiny:latest", "input": "hi"})
        other = await c.post(s.url("/v1/chat/completions"), json={"model": "tiny:7b", "messages": USER})
    for r in (ollama, chat, fast, msg, resp):
        assert r.status_code == 200, r.text
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
