"""The three APIs agree on the fields they share, and every answer is the JSON envelope (no HTML redirect)."""

from __future__ import annotations

import httpx
import trio

import strict
from rawhttp import RawConnection

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


async def test_fields_the_sdks_define_are_accepted_alike(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient(timeout=30) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={
            "model": MODEL, "messages": USER, "prompt_cache_retention": "24h", "top_logprobs": 0})
        assert chat.status_code == 200, chat.text
        assert strict.chat_completion(chat.json()).choices[0].message.content == "ok"
        resp = await c.post(s.url("/v1/responses"), json={
            "model": MODEL, "input": "hi", "prompt_cache_retention": "24h", "top_logprobs": 0,
            "context_management": [{"type": "compaction", "compact_threshold": 100000}]})
        assert resp.status_code == 200, resp.text
        assert strict.response(resp.json()).output_text == "ok"
        # what stays refused is refused alike, by name
        for path, body in [("/v1/chat/completions", {"model": MODEL, "messages": USER, "top_logprobs": 2}),
                           ("/v1/responses", {"model": MODEL, "input": "hi", "top_logprobs": 21}),
                           ("/v1/chat/completions", {"model": MODEL, "messages": USER, "top_logprobs": -1}),
                           ("/v1/responses", {"model": MODEL, "input": "hi", "context_management": "x"})]:
            r = await c.post(s.url(path), json=body)
            assert r.status_code == 400, r.text
            err = strict.openai_error(r.json())
            assert err.param in ("top_logprobs", "context_management"), err


async def test_doubled_slashes_answer_in_the_envelope(serve):
    """Werkzeug would redirect ``/v1//models`` with an HTML page; every path is answered as sent, in JSON."""
    s = await serve(["ok"])
    for path, anthropic in [("/v1//models", False), ("//v1/chat/completions", False), ("/v1//messages", True)]:
        conn = await RawConnection.open(s.base)
        with trio.fail_after(10):
            await conn.send("GET", path, headers={"anthropic-version": "2023-06-01"} if anthropic else {})
            status, headers, body = await conn.response()
        await conn.aclose()
        assert status in (404, 405) and headers["content-type"] == "application/json", (path, status, headers)
        (strict.anthropic_error if anthropic else strict.openai_error)(body)
