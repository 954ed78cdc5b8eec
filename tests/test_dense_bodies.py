"""A body of very many tiny JSON containers (``[],[],…``) does not stall the server for everyone else: json.loads
holds the GIL for its whole parse, on a worker thread too, and the cyclic collector walks every container it made.
Such a body is refused (413, the protocol's envelope) before it is parsed, over HTTP and over the Responses
WebSocket, while a plain request beside it still answers at once."""

from __future__ import annotations

import json

import httpx
import pytest
from httpx_ws import aconnect_ws

from tinytitan.speclang.json_text import MAX_CONTAINERS
from stall_helpers import health_while, health_while_posting

MODEL = "tinytitan-scripted"
LISTS = 20_000_000  # a 60 MB body: ~15 s of the GIL to parse before the fix


def dense(extra: str = "") -> bytes:
    return (b'{"model": "%s", %s"x": [' % (MODEL.encode(), extra.encode()) + b"[]," * LISTS + b"0]}")


@pytest.mark.parametrize("path,headers,extra", [
    ("/v1/chat/completions", {}, '"messages": [{"role": "user", "content": "hi"}], '),
    ("/v1/messages", {"anthropic-version": "2023-06-01"}, '"max_tokens": 5, "messages": [], '),
    ("/api/chat", {}, '"messages": [], '),
])
async def test_a_body_of_millions_of_tiny_containers_is_refused_without_stalling_others(serve, path, headers, extra):
    s = await serve(["ok"])
    worst, r = await health_while_posting(s, dense(extra), path, headers)
    assert worst < 3, f"/health took {worst:.1f} s while the body was read"
    assert r.status_code == 413, r.text[:300]
    assert str(MAX_CONTAINERS) in r.text


async def test_a_websocket_frame_of_millions_of_tiny_containers_is_refused_without_stalling_others(serve, monkeypatch):
    from hypercorn.config import Config

    monkeypatch.setattr(Config, "websocket_max_message_size", 65 << 20)  # as the command line's server (serve.py)
    s = await serve(["ok"])
    frame = dense('"type": "response.create", "store": false, "input": "hi", ').decode()

    async def attack():
        async with httpx.AsyncClient(timeout=120) as c, aconnect_ws(s.url("/v1/responses"), c,
                                                                     max_message_size_bytes=1 << 30) as ws:
            await ws.send_text(frame)
            return json.loads(await ws.receive_text())

    worst, reply = await health_while(s, attack)
    assert worst < 3, f"/health took {worst:.1f} s while the frame was read"
    assert reply["type"] == "error" and reply["status"] == 413, str(reply)[:300]


async def test_brackets_inside_strings_are_not_containers(serve):
    """A prompt full of brackets (code, JSON pasted as text) is not refused for them."""
    s = await serve(["ok"])
    text = "[{" * (MAX_CONTAINERS // 2 + 10)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/v1/chat/completions"),
                         json={"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 5})
    assert r.status_code != 413, r.text[:300]


async def test_remote_image_fetching_does_not_parse_such_a_body_either(serve):
    """With --fetch-images the server reads a body for image URLs before validation: a dense body is left to
    validation's refusal, not parsed (on the event loop) first."""
    s = await serve(["ok"], fetch_images=True)
    worst, r = await health_while_posting(
        s, dense('"messages": [{"role": "user", "content": "see http://example.com/a.png"}], '))
    assert worst < 3, f"/health took {worst:.1f} s while the body was read"
    assert r.status_code == 413, r.text[:300]
