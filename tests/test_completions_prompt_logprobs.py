"""Legacy Completions ``echo`` with ``logprobs``: the prompt's own tokens' log probabilities, the request
lm-evaluation-harness sends for every loglikelihood task. Each prompt token's figure is the model's own
log-softmax at the position before it (the first token's is null, as OpenAI and vLLM send it), equal to a direct
forward pass over the ids; every reply is checked strictly (tests/strict.py)."""

from __future__ import annotations

from operator import itemgetter

import pytest

from responses_helpers import client
from completions_helpers import streamed_logprobs


def direct(backend, ids: list[int]) -> list[float]:
    """Each token's log probability given those before it, from one forward pass over the ids (mlx)."""
    import mlx.core as mx

    model = backend.ensure_loaded() or backend.model
    logits = model(mx.array(ids)[None])[0].astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def parse_logprobs(outputs: dict, ctxlens: list[int]) -> list[tuple[float, bool]]:
    """lm-evaluation-harness's ``LocalCompletionsAPI.parse_logprobs`` (lm_eval/models/openai_completions.py), its
    few lines as written there: the continuation's figures are ``token_logprobs[ctxlen:-1]`` (the last entry, the
    one generated token of its ``max_tokens: 1``, left off)."""
    res = []
    for choice, ctxlen in zip(sorted(outputs["choices"], key=itemgetter("index")), ctxlens):
        assert ctxlen > 0, "Context length must be greater than 0"
        logprobs = sum(choice["logprobs"]["token_logprobs"][ctxlen:-1])
        tokens_logprobs = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        top_logprobs = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        is_greedy = True
        for tok, top in zip(tokens_logprobs, top_logprobs):
            if tok != max(top.values()):
                is_greedy = False
                break
        res.append((logprobs, is_greedy))
    return res


async def test_the_prompts_figures_are_a_direct_forward_pass(serve, demo_backend):
    s = await serve(backend=demo_backend)
    text = "The sea is calm and the sky is grey over the harbour"
    ids = demo_backend.tokenizer.encode(text, add_special_tokens=False)
    r = await client(s).completions.create(model=demo_backend.model_id, prompt=text, echo=True, logprobs=3,
                                           max_tokens=0)
    ch = r.choices[0]
    assert (ch.text, ch.finish_reason, r.usage.completion_tokens, r.usage.prompt_tokens) == (text, "length", 0,
                                                                                            len(ids))
    lp = ch.logprobs
    assert lp.tokens == [demo_backend.tokenizer.decode([i]) for i in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx(direct(demo_backend, ids), abs=1e-3)
    for chosen, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert 1 <= len(top) <= 3 and max(top.values()) >= chosen - 1e-4
    assert lp.text_offset == [len(demo_backend.tokenizer.decode(ids[:i])) for i in range(len(ids))]


async def test_a_request_as_lm_eval_sends_it(serve, demo_backend):
    """Token-id prompts, several in one request, ``echo``, ``logprobs: 1``, ``max_tokens: 1`` (lm-eval's) and 0
    (vLLM's echo alone): parsed as lm-eval parses them, each continuation's sum is the model's own."""
    s = await serve(backend=demo_backend)
    tok = demo_backend.tokenizer
    pairs = [("The capital of France is", " Paris"), ("Water boils at", " one hundred degrees"),
             ("Once upon a time", " there was a fox")]
    prompts = [tok.encode(c + x, add_special_tokens=False) for c, x in pairs]
    ctxlens = [len(tok.encode(c, add_special_tokens=False)) for c, _ in pairs]
    for max_tokens in (1, 0):
        r = await client(s).completions.create(model=demo_backend.model_id, prompt=prompts, echo=True, logprobs=1,
                                               max_tokens=max_tokens, temperature=0, seed=1234)
        body = r.model_dump()
        assert [c["index"] for c in body["choices"]] == [0, 1, 2]
        for c, ids in zip(body["choices"], prompts):
            listed = len(c["logprobs"]["token_logprobs"])
            assert listed == len(ids) + max_tokens  # (an end-of-turn token sampled is listed too)
            assert c["text"].startswith(tok.decode(ids)) and c["logprobs"]["tokens"][:len(ids)] == \
                [tok.decode([i]) for i in ids]
        if max_tokens == 1:
            got = parse_logprobs(body, ctxlens)
        else:  # with nothing generated, the continuation runs to the end
            got = [(sum(c["logprobs"]["token_logprobs"][n:]), None) for c, n in zip(body["choices"], ctxlens)]
        for (total, _), ids, n in zip(got, prompts, ctxlens):
            assert total == pytest.approx(sum(direct(demo_backend, ids)[n - 1:]), abs=1e-3)


async def test_echoed_answer_tokens_follow_the_prompts(serve, demo_backend):
    """With an answer: the prompt's tokens, then the answer's, the offsets running on over both; streamed, the
    chunks joined are the same lists."""
    s = await serve(backend=demo_backend)
    c = client(s)
    ask = dict(model=demo_backend.model_id, prompt="A quiet morning in the", echo=True, logprobs=2, max_tokens=6,
               temperature=0)
    r = await c.completions.create(**ask)
    ch = r.choices[0]
    lp = ch.logprobs
    n = r.usage.prompt_tokens
    assert ch.text.startswith("A quiet morning in the")
    assert len(lp.tokens) == n + r.usage.completion_tokens
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[n] == len("A quiet morning in the")
    text, joined = await streamed_logprobs(c, ask)
    assert text == ch.text and (joined["tokens"], joined["text_offset"]) == (lp.tokens, lp.text_offset)
    assert joined["token_logprobs"][0] is None
    assert joined["token_logprobs"][1:] == pytest.approx(lp.token_logprobs[1:], abs=1e-4)


async def test_a_prompt_longer_than_a_chunk_and_the_same_prompt_again(serve, demo_backend):
    """A prompt read in several prefill chunks gives each token its figure; sent again (its prefix cached by the
    first), it is read whole again and gives the same figures."""
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    tok = demo_backend.tokenizer
    words = "the sea and the sky and a boat on the water under a grey morning light".split()
    ids = tok.encode(" ".join(words[i % len(words)] for i in range(1400)), add_special_tokens=False)[:1300]
    assert len(ids) == 1300  # over 1024: read as a first chunk of 32, then the rest (scheduler.py)
    ask = dict(model=demo_backend.model_id, prompt=ids, echo=True, logprobs=1, max_tokens=0)
    first = (await client(s).completions.create(**ask)).choices[0]
    assert first.text == tok.decode(ids) and len(first.logprobs.token_logprobs) == len(ids)
    assert first.logprobs.token_logprobs[1:] == pytest.approx(direct(demo_backend, ids), abs=2e-3)
    again = await client(s).completions.create(**ask)
    assert again.usage.prompt_tokens_details is None or not again.usage.prompt_tokens_details.cached_tokens
    assert again.choices[0].logprobs.token_logprobs[1:] == pytest.approx(first.logprobs.token_logprobs[1:],
                                                                         abs=1e-4)


async def test_echo_of_token_ids_is_their_text(serve):
    s = await serve(["!"])
    ids = s.engine.backend.tokenizer.encode("Tell me a story", add_special_tokens=False)
    r = await client(s).completions.create(model="tinytitan-scripted", prompt=ids, echo=True, max_tokens=1)
    assert r.choices[0].text == "Tell me a story!" and r.choices[0].logprobs is None


@pytest.mark.parametrize("stream", [False, True])
async def test_echo_of_token_ids_alone_reads_their_prompt_from_the_cache(serve, demo_backend, stream):
    """No ``logprobs``: nothing asks for the prompt's figures, so the row reuses the prompt cache like any other."""
    s = await serve(backend=demo_backend)
    text = "A long quiet morning in the harbour town, the boats at rest"
    ids = demo_backend.tokenizer.encode(text, add_special_tokens=False)
    ask = dict(model=demo_backend.model_id, prompt=ids, echo=True, max_tokens=2, temperature=0)
    got = []
    for _ in range(2):
        if stream:
            chunks = [c async for c in await client(s).completions.create(**ask, stream=True,
                                                                            stream_options={"include_usage": True})]
            got.append(("".join(ch.text for c in chunks for ch in c.choices), chunks[-1].usage))
        else:
            r = await client(s).completions.create(**ask)
            got.append((r.choices[0].text, r.usage))
    (first, _), (again, usage) = got
    assert first == again and again.startswith(demo_backend.tokenizer.decode(ids))
    assert usage.prompt_tokens == len(ids) and usage.prompt_tokens_details.cached_tokens > 0


async def test_max_tokens_zero_needs_echo(serve):
    import openai

    s = await serve(["!"])
    with pytest.raises(openai.BadRequestError) as e:
        await client(s).completions.create(model="tinytitan-scripted", prompt="Hi", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    r = await client(s).completions.create(model="tinytitan-scripted", prompt="Hi there", max_tokens=0, echo=True)
    assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == ("Hi there", "length", 0)


async def lm_eval_request(serve, answer: str):
    """lm-eval's scoring request (a prompt of token ids, ``echo``, ``logprobs: 1``, ``max_tokens: 1``) to a model
    that answers ``answer``: (the tokenizer, the prompt's ids, the response)."""
    s = await serve([answer])
    tok = s.engine.backend.tokenizer
    ids = tok.encode("The capital of France is Paris", add_special_tokens=False)
    r = await client(s).completions.create(model="tinytitan-scripted", prompt=[ids], echo=True, logprobs=1,
                                           max_tokens=1)
    return tok, ids, r


async def test_an_answer_that_ends_at_once_lists_its_end_token(serve):
    """lm-eval drops the last entry as the one token its ``max_tokens: 1`` generated: where the model ends its turn
    at once, that entry is the end-of-turn token (as OpenAI and vLLM list it), never the prompt's last token."""
    tok, ids, r = await lm_eval_request(serve, "")
    ch = r.choices[0]
    assert ch.finish_reason == "stop" and ch.text == tok.decode(ids)
    assert ch.logprobs.tokens[:-1] == [tok.decode([i]) for i in ids]
    assert ch.logprobs.tokens[-1] == tok.decode([tok.eos_token_id])
    assert parse_logprobs(r.model_dump(), [2]) == [(0.0, True)]  # the scripted model is certain of each token
    assert len(ch.logprobs.token_logprobs[2:-1]) == len(ids) - 2


async def test_a_generated_token_cut_inside_its_character_is_the_last_entry(serve):
    """lm-eval's ``max_tokens: 1`` where the one token generated is the first byte of a character: its text is
    left out of the answer, and it is still the last entry (the one lm-eval drops), never the prompt's last token."""
    tok, ids, r = await lm_eval_request(serve, "é and more")
    ch = r.choices[0]
    assert (ch.text, ch.finish_reason, r.usage.completion_tokens) == (tok.decode(ids), "length", 1)
    assert ch.logprobs.tokens == [tok.decode([i]) for i in ids] + ["\ufffd"]
    assert ch.logprobs.text_offset[-1] == len(ch.text)
    assert parse_logprobs(r.model_dump(), [2]) == [(0.0, True)]
    assert len(ch.logprobs.token_logprobs[2:-1]) == len(ids) - 2


async def test_an_opening_the_tokenizer_adds_is_listed_and_spells_no_echoed_text(serve, tmp_path):
    """A raw prompt opens with the tokenizer's BOS (Llama's): listed first (its entry null), as vLLM lists it; the
    echoed text is the prompt as sent, and each token's offset is where it stands in that text."""
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    from family_fixtures import llama_with_bos

    tok, bos = llama_with_bos(tmp_path)
    s = await serve(backend=ScriptedBackend([ScriptEntry("x")], tok, model_id="m"))
    text = "The capital of France is"
    r = await client(s).completions.create(model="m", prompt=text, echo=True, logprobs=0, max_tokens=0)
    lp = r.choices[0].logprobs
    ids = tok.encode(text, add_special_tokens=False)
    assert r.choices[0].text == text and lp.tokens == [tok.decode([bos])] + [tok.decode([i]) for i in ids]
    assert lp.text_offset == [0] + [len(tok.decode(ids[:i])) for i in range(len(ids))]
    assert lp.token_logprobs == [None] + [0.0] * len(ids)


async def test_each_of_n_choices_lists_the_prompts_tokens(serve, demo_backend):
    """``n`` choices of one prompt (which share its reading where they can: choices.py): each reads it whole
    for its figures, and each lists the same."""
    s = await serve(backend=demo_backend)
    r = await client(s).completions.create(model=demo_backend.model_id, prompt="The sea is calm", n=2, echo=True,
                                           logprobs=1, max_tokens=2, seed=7)
    n = r.usage.prompt_tokens
    first, second = (c.logprobs for c in sorted(r.choices, key=lambda c: c.index))
    assert first.tokens[:n] == second.tokens[:n] and first.token_logprobs[0] is second.token_logprobs[0] is None
    assert first.token_logprobs[1:n] == pytest.approx(second.token_logprobs[1:n], abs=1e-4)
    assert all(c.text.startswith("The sea is calm") for c in r.choices)
