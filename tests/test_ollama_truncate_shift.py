"""``truncate`` and ``shift``, fields of Ollama's ChatRequest and GenerateRequest (api/types.go) that its Go
client sends whenever a program sets them, are taken, not refused as unknown. Either value reads as this server
works: a prompt that does not fit the context window is refused by name (``truncate: false`` asks exactly that;
``true``, dropping the oldest turns to fit, is not done: the refusal says so), and an answer that reaches the
window's end stops there with ``done_reason: "length"`` (``shift: false``; ``true`` does not make it go on)."""

from __future__ import annotations

import httpx
import pytest

MODEL = "tinytitan-scripted"


@pytest.mark.parametrize("field", ["truncate", "shift"])
async def test_truncate_and_shift_are_taken(serve, field):
    s = await serve(["Hello."] * 8)
    async with httpx.AsyncClient(timeout=30) as h:
        for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/api/generate", {"prompt": "hi"})):
            for value in (True, False):
                r = await h.post(s.url(path), json={"model": MODEL, "stream": False, field: value, **body})
                assert r.status_code == 200, r.text
                answer = r.json()
                assert answer.get("response", answer.get("message", {}).get("content")) == "Hello."
            r = await h.post(s.url(path), json={"model": MODEL, "stream": False, field: "yes", **body})
            assert r.status_code == 400 and f"'{field}'" in r.json()["error"], r.text
