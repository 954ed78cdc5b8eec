"""Helpers for the Responses tests: an SDK client, raw SSE reading, and a prompt recorder; a stream the client
hangs up on (hang_up, with LONG a text long enough to leave) and the stored response read back (stored)."""

from __future__ import annotations

import json

import httpx
import trio
from openai import AsyncOpenAI

MODEL = "tinytitan-scripted"


def client(s) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)


def record_prompts(s) -> list:
    """Every ChatRequest the engine prepares, in order (the backend's prepare wrapped)."""
    seen = []
    backend = s.engine.backend
    real = backend.prepare

    def prepare(req):
        prepared = real(req)
        seen.append(prepared)
        return prepared

    backend.prepare = prepare
    return seen


async def sse_events(s, body: dict, path: str = "/v1/responses") -> list[tuple[str, dict]]:
    """POST a streaming request and parse the SSE reply into (event name, data) pairs."""
    out = []
    async with httpx.AsyncClient(timeout=30) as h:
        async with h.stream("POST", s.url(path), json=body) as resp:
            assert resp.status_code == 200, await resp.aread()
            assert resp.headers["content-type"].startswith("text/event-stream")
            name = None
            async for line in resp.aiter_lines():
                assert line != "data: [DONE]", "Responses streams have no [DONE] terminal"
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    out.append((name, json.loads(line[6:])))
                    name = None
    return out


async def post(s, path: str, body, **kw) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as h:
        if isinstance(body, (bytes, str)):
            return await h.post(s.url(path), content=body, headers={"content-type": "application/json"}, **kw)
        return await h.post(s.url(path), json=body, **kw)


async def get(s, path: str, **kw) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as h:
        return await h.get(s.url(path), **kw)


LONG = " ".join(f"word{i}" for i in range(400))


async def hang_up(s, body: dict, after: str, count: int = 3) -> str:
    """Stream ``body`` and hang up after the ``count``-th event named ``after``; the response's id."""
    rid, seen = None, 0
    async with httpx.AsyncClient(timeout=30) as h:
        async with h.stream("POST", s.url("/v1/responses"), json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                    rid = rid or data["response"]["id"]
                    seen += data["type"] == after
                    if seen == count:
                        break
    with trio.fail_after(10):  # the server noticed: its generation ended
        while s.engine.running or s.engine.waiting:
            await trio.sleep(0.02)
    return rid


async def stored(s, rid: str) -> dict:
    with trio.fail_after(10):  # (written as the stream's body ends)
        while True:
            async with httpx.AsyncClient(timeout=30) as h:
                r = await h.get(s.url(f"/v1/responses/{rid}"))
            if r.status_code != 404:
                assert r.status_code == 200, r.text
                return r.json()
            await trio.sleep(0.05)
