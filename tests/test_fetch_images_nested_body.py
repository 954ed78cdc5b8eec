"""With --fetch-images a body nested past the JSON parser's depth is a 400 naming the nesting, never a 500."""

from __future__ import annotations

import json

import httpx
import pytest

import strict


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", b'{"model":"tinytitan-scripted","messages":[{"role":"user","content":"http"}],"x":'),
    ("/v1/messages", b'{"model":"tinytitan-scripted","max_tokens":5,"messages":[{"role":"user","content":"http"}],'
                     b'"x":'),
    ("/v1/responses", b'{"model":"tinytitan-scripted","input":"http","x":'),
])
async def test_a_deeply_nested_body_is_a_400_where_images_are_fetched(serve, path, body):
    """With --fetch-images the body is parsed once before validation, to find remote image URLs: a body nested
    past the parser's depth raised RecursionError there, a 500."""
    s = await serve(["ok"], fetch_images=True)
    raw = body + b"[" * 5000 + b"]" * 5000 + b"}"
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    assert "nested too deeply" in r.text
    strict.body(r.content)
