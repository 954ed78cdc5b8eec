"""Helpers for the Responses tests: an SDK client, raw SSE reading, and a prompt recorder."""

from __future__ import annotations

import json

import httpx
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
