"""Responses ``include: ["message.output_text.logprobs"]`` with ``top_logprobs``: each output_text part's
``logprobs`` (``ResponseOutputText.Logprob``) and each ``response.output_text.delta`` / ``.done`` event's
(``ResponseTextDeltaEvent.logprobs``), streamed and not (every reply is checked strictly: tests/strict.py)."""

from __future__ import annotations

import pytest

from responses_helpers import client

LOGPROBS = ["message.output_text.logprobs"]


async def test_output_text_tokens_with_their_likeliest_alternatives(serve, demo_backend):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    c = client(s)
    ask = dict(model=demo_backend.model_id, input="Write a haiku about the sea.", max_output_tokens=16,
               temperature=0, top_logprobs=3, include=LOGPROBS, reasoning={"effort": "none"})
    r = await c.responses.create(**ask)
    (part,) = [p for item in r.output if item.type == "message" for p in item.content]
    tokens = part.logprobs
    assert tokens and len(tokens) <= r.usage.output_tokens
    assert b"".join(bytes(t.bytes) for t in tokens).decode().rstrip() == part.text.rstrip()
    for t in tokens:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert (t.top_logprobs[0].token, t.top_logprobs[0].logprob) == (t.token, t.logprob)  # greedy: the likeliest
    assert r.top_logprobs == 3
    # streamed: the delta events' tokens are the part's, and so are the done event's and the final part's
    deltas, done, final = [], None, None
    async for ev in await c.responses.create(stream=True, **ask):
        if ev.type == "response.output_text.delta":
            deltas += ev.logprobs
        elif ev.type == "response.output_text.done":
            done = ev.logprobs
        elif ev.type in ("response.completed", "response.incomplete"):
            final = [p for item in ev.response.output if item.type == "message" for p in item.content][0].logprobs
    assert [(t.token, [a.token for a in t.top_logprobs]) for t in deltas] == \
        [(t.token, [a.token for a in t.top_logprobs]) for t in tokens]
    assert [t.logprob for t in deltas] == pytest.approx([t.logprob for t in tokens], abs=1e-4)
    assert [t.token for t in done] == [t.token for t in deltas] and [t.token for t in final] == [t.token for t in deltas]


async def test_not_included_none_and_top_logprobs_alone_none(serve):
    """Without the include there are none, ``top_logprobs`` alone included (as the API: the SDKs add the include
    where a client asks ``top_logprobs``); with it, the scripted model's certain tokens."""
    s = await serve(["Hello there."])
    c = client(s)
    for kw in ({}, {"top_logprobs": 2}):
        r = await c.responses.create(model="tinytitan-scripted", input="hi", **kw)
        assert r.output[0].content[0].logprobs == []
    r = await c.responses.create(model="tinytitan-scripted", input="hi", include=LOGPROBS)
    tokens = r.output[0].content[0].logprobs
    assert "".join(t.token for t in tokens) == "Hello there." and all(
        t.logprob == 0.0 and t.top_logprobs == [] for t in tokens)
