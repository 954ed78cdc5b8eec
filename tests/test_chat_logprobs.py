"""Chat Completions ``logprobs`` / ``top_logprobs``: each answer token's log probability in
``choices[].logprobs.content`` (streamed: each content chunk carries its delta's tokens), as the openai SDK's
``ChoiceLogprobs`` / ``ChatCompletionTokenLogprob`` read them (every reply is checked strictly: tests/strict.py)."""

from __future__ import annotations

import httpx
import openai
import pytest

from chat_helpers import THINK_TEXT_TOOL, TOOLS, USER

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


def spelled(tokens) -> str:
    return b"".join(bytes(t.bytes) for t in tokens).decode()


async def streamed(c, **kw) -> tuple[str, list, list]:
    """The content, the tokens' log probabilities and each chunk's ``choices[0].logprobs`` of a stream."""
    content, tokens, per_chunk = "", [], []
    async for chunk in await c.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            if ch.delta.content:
                per_chunk.append(ch.logprobs)
            if ch.logprobs is not None:
                tokens += ch.logprobs.content
    return content, tokens, per_chunk


async def test_greedy_answer_tokens_with_their_likeliest_alternatives(serve, demo_backend):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    c = client(s)
    ask = dict(model=demo_backend.model_id, messages=HAIKU, max_tokens=16, temperature=0, logprobs=True,
               top_logprobs=3, extra_body=NO_THINKING)
    r = await c.chat.completions.create(**ask)
    tokens = r.choices[0].logprobs.content
    assert tokens and len(tokens) <= r.usage.completion_tokens
    assert spelled(tokens).rstrip() == r.choices[0].message.content.rstrip()
    for t in tokens:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
        # greedy: the chosen token is the likeliest of the model's own distribution
        assert (t.top_logprobs[0].token, t.top_logprobs[0].logprob) == (t.token, t.logprob)
        assert t.bytes == list(t.token.encode()) or "\ufffd" in t.token
    # streamed: each content chunk carries its tokens; together they are the non-streamed list
    content, chunks_tokens, per_chunk = await streamed(c, **ask)
    assert content == r.choices[0].message.content and all(p is not None for p in per_chunk)
    assert [(t.token, t.bytes, t.top_logprobs) for t in chunks_tokens] == \
        [(t.token, t.bytes, t.top_logprobs) for t in tokens]
    assert [t.logprob for t in chunks_tokens] == pytest.approx([t.logprob for t in tokens], abs=1e-4)


async def test_logprobs_alone_and_not_asked(serve, demo_backend):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    c = client(s)
    ask = dict(model=demo_backend.model_id, messages=USER, max_tokens=6, temperature=0, extra_body=NO_THINKING)
    chosen = await c.chat.completions.create(logprobs=True, **ask)
    assert chosen.choices[0].logprobs.content and all(t.top_logprobs == [] for t in chosen.choices[0].logprobs.content)
    plain = await c.chat.completions.create(**ask)
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == chosen.choices[0].message.content
    content, tokens, per_chunk = await streamed(c, **ask)
    assert tokens == [] and all(p is None for p in per_chunk)


async def test_only_the_answer_text_tokens_are_listed(serve):
    """Reasoning and a tool call's markup are not the message's content: only its text's tokens are listed
    (the scripted model is certain of every token: log probability 0, no other token possible)."""
    s = await serve([THINK_TEXT_TOOL])
    c = client(s)
    r = await c.chat.completions.create(model="tinytitan-scripted", messages=USER, tools=TOOLS, logprobs=True,
                                        top_logprobs=2)
    tokens = r.choices[0].logprobs.content
    assert r.choices[0].message.content == "Let me check." and spelled(tokens).rstrip() == "Let me check."
    assert all(t.logprob == 0.0 and [(a.token, a.logprob) for a in t.top_logprobs] == [(t.token, 0.0)]
               for t in tokens)
    content, streamed_tokens, _ = await streamed(c, model="tinytitan-scripted", messages=USER, tools=TOOLS,
                                                 logprobs=True, top_logprobs=2)
    assert streamed_tokens == tokens


@pytest.mark.parametrize("body, words", [
    ({"top_logprobs": 2}, "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled."),
    ({"top_logprobs": 2, "logprobs": False}, "only allowed when 'logprobs' is enabled"),
    ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
])
async def test_refused_in_openai_words(serve, body, words):
    s = await serve(["Hello."])
    async with httpx.AsyncClient(timeout=30) as h:
        r = await h.post(s.url("/v1/chat/completions"), json={"model": "tinytitan-scripted", "messages": USER, **body})
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"] and r.json()["error"]["param"] == "top_logprobs"


async def test_a_character_the_cap_cuts_has_its_tokens_listed_last(serve):
    """The cap strikes inside a character: the content leaves it out, and its tokens (generated and counted)
    are listed last with their own bytes, as OpenAI lists a token that is part of a character."""
    s = await serve(["é☃!"])
    c = client(s)
    ask = dict(model="tinytitan-scripted", messages=USER, logprobs=True, max_tokens=3)  # é's two bytes, ☃'s first
    r = await c.chat.completions.create(**ask)
    tokens = r.choices[0].logprobs.content
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("é", "length")
    assert len(tokens) == r.usage.completion_tokens == 3
    assert b"".join(bytes(t.bytes) for t in tokens) == "é☃".encode()[:3]
    content, streamed_tokens, _ = await streamed(c, **ask)
    assert content == "é" and streamed_tokens == tokens
