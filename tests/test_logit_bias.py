"""OpenAI's logit_bias on Chat and Completions: token ids of the served model's tokenizer, each bias added to
its token's logit before the draw; keys, values and ids it cannot take are refused naming the field."""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


async def test_a_bias_of_100_makes_the_greedy_answer_that_token(serve, demo_backend):
    s = await serve(backend=demo_backend)
    c = client(s)
    tok = demo_backend.tokenizer
    (token,) = tok.encode(" zebra", add_special_tokens=False)[:1]
    plain = await c.completions.create(model=demo_backend.model_id, prompt="def main():\n", max_tokens=4, temperature=0)
    biased = await c.completions.create(model=demo_backend.model_id, prompt="def main():\n", max_tokens=4,
                                        temperature=0, logit_bias={str(token): 100})
    assert biased.choices[0].text == tok.decode([token] * 4) != plain.choices[0].text
    chat = await c.chat.completions.create(model=demo_backend.model_id, messages=USER, max_tokens=3, temperature=0,
                                           logit_bias={str(token): 100}, reasoning_effort="none")
    assert chat.choices[0].message.content == tok.decode([token] * 3).lstrip()  # (an answer's leading space goes)


@pytest.mark.parametrize("path, base", [("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "hi"})])
@pytest.mark.parametrize("bias, message", [
    ({"You": 6}, "Invalid key in 'logit_bias': You. You should only be submitting non-negative integers."),
    ({"-5": 1}, "Invalid key in 'logit_bias': -5."),
    ({"5": 101}, "101 for token 5 is not a number from -100 to 100"),
    ({"5": "up"}, "\"up\" for token 5"),
    ({"5": True}, "true for token 5"),
    ({"100000000": 1}, "Invalid key in 'logit_bias': 100000000. This model's token ids are 0 to "),
])
async def test_what_it_cannot_take_is_refused_naming_logit_bias(serve, path, base, bias, message):
    s = await serve(["never"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url(path), json={"model": MODEL, **base, "logit_bias": bias})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "logit_bias" and err["type"] == "invalid_request_error" and message in err["message"]


async def test_an_empty_or_null_bias_changes_nothing(serve):
    s = await serve(["same", "same"])
    for bias in ({}, None):
        r = await client(s).chat.completions.create(model=MODEL, messages=USER, logit_bias=bias)
        assert r.choices[0].message.content == "same"


async def test_an_added_tokens_id_is_taken_where_the_model_states_no_width(serve, demo_tok):
    """Where the backend states no logits width (the scripted backend; a config without ``vocab_size``), the ids
    are the tokenizer's own, its added tokens included: banning the end of turn (an added token past the
    tokenizer's base ``vocab_size``) is the commonest bias, and was refused as past the vocabulary."""
    end = demo_tok.convert_tokens_to_ids("<|im_end|>")
    assert end >= demo_tok.vocab_size  # (the case this holds: an added token past the base vocabulary)
    s = await serve(["fine", "fine"])
    for path, base in (("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "hi"})):
        async with httpx.AsyncClient() as c:
            r = await c.post(s.url(path), json={"model": MODEL, **base, "logit_bias": {str(end): -100}})
        assert r.status_code == 200, r.text
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "hi",
                                                         "logit_bias": {str(len(demo_tok.get_vocab())): 1}})
    assert r.status_code == 400 and f"0 to {len(demo_tok.get_vocab()) - 1}." in r.json()["error"]["message"], r.text


def test_the_bias_is_added_before_the_repetition_penalty(demo_backend):
    """The bias is added to the logits as the model gives them, before a multiplicative penalty scales them: the
    order of mlx-lm's own ``make_logits_processors``, vLLM's sampler and llama.cpp's sampler chain, so a bias on a
    repeated token means what it means on those servers."""
    import mlx.core as mx

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode.token_events import DecodeLoop

    prepared = demo_backend.prepare(ChatRequest(model=demo_backend.model_id, messages=(Message("user", "hi"),),
                                                repetition_penalty=2.0, logit_bias=((7, 10.0), (9, -10.0))))
    loop = DecodeLoop(demo_backend.parser(prepared), (), lambda _ev: None, prepared.sampling)
    # (as wide as the model's logits: the penalty reads and writes the prompt's token ids, and MLX checks no bounds —
    # a narrower array was written past its end)
    logits = mx.zeros((1, demo_backend.vocab_size)).at[:, 7].add(4.0).at[:, 9].add(-4.0)
    for processor in demo_backend.logits_processors(prepared, loop):
        logits = processor(mx.array(prepared.tokens + [7, 9]), logits)
    assert logits[0, 7].item() == (4 + 10) / 2 and logits[0, 9].item() == (-4 - 10) * 2
