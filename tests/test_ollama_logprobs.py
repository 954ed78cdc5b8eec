"""Ollama ``logprobs`` / ``top_logprobs`` on ``/api/chat`` and ``/api/generate``: each answer token's
``{token, logprob, bytes, top_logprobs}`` on the line that sends its text, and all of them on the folded answer
(every reply is checked strictly against the ollama client's models: tests/strict.py)."""

from __future__ import annotations

import httpx
import ollama
import pytest

HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]


def client(s) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=s.base)


@pytest.mark.parametrize("route", ["chat", "generate"])
async def test_answer_tokens_with_their_likeliest_alternatives(serve, demo_backend, route):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    c = client(s)
    options = {"temperature": 0, "num_predict": 12}
    if route == "chat":
        call = lambda **kw: c.chat(model=demo_backend.model_id, messages=HAIKU, think=False, options=options,
                                   logprobs=True, top_logprobs=3, **kw)
        text_of = lambda r: r.message.content
    else:
        call = lambda **kw: c.generate(model=demo_backend.model_id, prompt="Write a haiku about the sea.",
                                       think=False, options=options, logprobs=True, top_logprobs=3, **kw)
        text_of = lambda r: r.response
    r = await call()
    tokens = r.logprobs
    assert tokens and len(tokens) <= r.eval_count
    for t in tokens:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert (t.top_logprobs[0].token, t.top_logprobs[0].logprob) == (t.token, t.logprob)  # greedy: the likeliest
    streamed, text = [], ""
    async for line in await call(stream=True):
        text += text_of(line) or ""
        streamed += line.logprobs or []
    assert text == text_of(r)
    assert [(t.token, [a.token for a in t.top_logprobs]) for t in streamed] == \
        [(t.token, [a.token for a in t.top_logprobs]) for t in tokens]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in tokens], abs=1e-4)


async def test_bytes_and_none_unless_asked(serve):
    """The scripted model is certain of each token; a token's bytes spell the answer; without ``logprobs``, and
    with ``top_logprobs`` alone (as Ollama), a reply has none."""
    s = await serve(["Hello there."])
    c = client(s)
    async with httpx.AsyncClient(timeout=30) as h:
        r = (await h.post(s.url("/api/chat"), json={"model": "tinytitan-scripted", "messages": HAIKU,
                                                     "logprobs": True, "stream": False})).json()
    assert r["message"]["content"] == "Hello there."
    assert b"".join(bytes(t["bytes"]) for t in r["logprobs"]) == b"Hello there."
    assert all(t["logprob"] == 0.0 and set(t) == {"token", "logprob", "bytes"} for t in r["logprobs"])
    for kw in ({}, {"top_logprobs": 2}):
        assert (await c.chat(model="tinytitan-scripted", messages=HAIKU, **kw)).logprobs is None
