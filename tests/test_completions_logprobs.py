"""Legacy Completions ``logprobs: N``: ``choices[].logprobs`` with ``tokens``, ``token_logprobs``,
``top_logprobs`` and ``text_offset`` as the openai SDK's ``CompletionChoice.Logprobs`` reads them, streamed and not
(every reply is checked strictly: tests/strict.py)."""

from __future__ import annotations

import pytest

from responses_helpers import client
from completions_helpers import streamed_logprobs


async def test_generated_tokens_with_their_likeliest_alternatives(serve, demo_backend):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    c = client(s)
    ask = dict(model=demo_backend.model_id, prompt="The sea is", max_tokens=12, temperature=0, logprobs=3)
    r = await c.completions.create(**ask)
    lp = r.choices[0].logprobs
    n = len(lp.tokens)
    assert n == r.usage.completion_tokens  # one entry per completion token (the end-of-turn token is neither)
    assert n >= 1 and len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    for token, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0 and 1 <= len(top) <= 3
        # greedy: the chosen token is the likeliest of the model's own distribution
        assert top[token] == chosen == max(top.values())
    if "\ufffd" not in "".join(lp.tokens):
        assert "".join(lp.tokens).rstrip() == r.choices[0].text.rstrip()
    # streamed: the chunks' lists, joined, are the non-streamed ones
    text, joined = await streamed_logprobs(c, ask)
    assert text == r.choices[0].text
    assert (joined["tokens"], joined["text_offset"]) == (lp.tokens, lp.text_offset)
    assert joined["token_logprobs"] == pytest.approx(lp.token_logprobs, abs=1e-4)


async def test_text_offsets_count_characters_not_token_pieces(serve):
    """A character the tokenizer spends several tokens on: each of its tokens decodes alone to U+FFFD, and the
    offsets count the character once (the next token starts one character on)."""
    s = await serve(["é☃!"])
    r = await client(s).completions.create(model="tinytitan-scripted", prompt="Tell me", logprobs=0)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "é☃!" and len(lp.tokens) > 3
    assert lp.text_offset[-1] == 2 and set(lp.text_offset) == {0, 1, 2}


async def test_zero_asks_for_the_chosen_token_alone_and_none_for_nothing(serve):
    s = await serve(["Once upon a time"])
    c = client(s)
    r = await c.completions.create(model="tinytitan-scripted", prompt="Tell me", logprobs=0)
    lp = r.choices[0].logprobs
    # the scripted model is certain of each token
    assert "".join(lp.tokens) == r.choices[0].text == "Once upon a time"
    assert r.choices[0].finish_reason == "stop" and len(lp.tokens) == r.usage.completion_tokens  # (its end: neither)
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(lp.tokens))]
    assert lp.token_logprobs == [0.0] * len(lp.tokens) and lp.top_logprobs == [{}] * len(lp.tokens)
    plain = await c.completions.create(model="tinytitan-scripted", prompt="Tell me")
    assert plain.choices[0].logprobs is None


async def test_a_character_the_cap_cuts_has_its_tokens_listed_last(serve):
    """The cap strikes inside a character: its text is left out, but its tokens were generated and counted, so
    they are listed last, each decoded alone to U+FFFD and at the text's end (as OpenAI and vLLM list every
    generated token): one entry per completion token, streamed and not."""
    s = await serve(["é☃!"])
    c = client(s)
    ask = dict(model="tinytitan-scripted", prompt="Tell me", logprobs=1, max_tokens=3)  # é's two bytes, ☃'s first
    r = await c.completions.create(**ask)
    ch = r.choices[0]
    assert (ch.text, ch.finish_reason, r.usage.completion_tokens) == ("é", "length", 3)
    assert ch.logprobs.tokens == ["\ufffd"] * 3 and ch.logprobs.text_offset == [0, 0, 1]
    assert ch.logprobs.token_logprobs == [0.0] * 3 and ch.logprobs.top_logprobs == [{"\ufffd": 0.0}] * 3
    text, joined = await streamed_logprobs(c, ask)
    assert text == "é" and joined == {"tokens": ch.logprobs.tokens, "token_logprobs": ch.logprobs.token_logprobs,
                                      "top_logprobs": ch.logprobs.top_logprobs, "text_offset": ch.logprobs.text_offset}
