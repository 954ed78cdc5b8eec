"""Sampling values on the real MLX path (the demo model): what the APIs define for their edge values.

top_p 0 keeps only the most likely token (OpenAI, Anthropic, Ollama's nucleus of no mass), so the answer is the
greedy one whatever the temperature; Ollama's seed -1 is "no seed" (a fresh draw each time); Ollama's
repeat_last_n is the window its penalties look back over (0: penalties off)."""

from __future__ import annotations

import httpx
import pytest

USER = [{"role": "user", "content": "Tell me a story about a cat."}]


async def post(s, path, body):
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url(path), json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def chat(s, m, **kw):
    j = await post(s, "/v1/chat/completions", {"model": m, "messages": USER, "max_tokens": 8, **kw})
    return j["choices"][0]["message"]["content"]


async def ollama(s, m, **options):
    j = await post(s, "/api/chat", {"model": m, "messages": USER, "stream": False,
                                    "options": {"num_predict": 8, **options}})
    return j["message"]["content"]


async def test_top_p_zero_keeps_only_the_most_likely_token(serve, demo_backend):
    s = await serve(backend=demo_backend)
    m = demo_backend.model_id
    greedy = await chat(s, m, temperature=0)
    assert await chat(s, m, temperature=1, top_p=1e-9) == greedy  # the nucleus of the least mass: one token
    assert [await chat(s, m, temperature=1, top_p=0) for _ in range(3)] == [greedy] * 3
    assert [await ollama(s, m, temperature=1, top_p=0) for _ in range(2)] == [await ollama(s, m, temperature=0)] * 2
    j = await post(s, "/v1/messages", {"model": m, "messages": USER, "max_tokens": 8, "temperature": 1, "top_p": 0})
    assert j["content"][0]["text"] == greedy


async def test_ollama_seed_minus_one_is_no_seed(serve, demo_backend):
    """Ollama's sampler is seeded only where ``seed != -1`` (sample/samplers.go): -1 draws afresh each time."""
    s = await serve(backend=demo_backend)
    m = demo_backend.model_id
    seeded = {await ollama(s, m, temperature=1, seed=5) for _ in range(2)}
    assert len(seeded) == 1  # a real seed: the same answer
    unseeded = {await ollama(s, m, temperature=1, seed=-1) for _ in range(4)}
    assert len(unseeded) > 1, unseeded


async def test_ollama_repeat_last_n_is_the_penalty_window(serve, demo_backend):
    """repeat_last_n 0 turns the penalties off (Ollama: 'how far back the model looks to prevent repetition,
    0 = disabled'); a window of 1 penalises the last token only."""
    s = await serve(backend=demo_backend)
    m = demo_backend.model_id
    plain = await ollama(s, m, temperature=0)
    assert await ollama(s, m, temperature=0, repeat_penalty=50, repeat_last_n=0) == plain
    assert await ollama(s, m, temperature=0, frequency_penalty=50, repeat_last_n=0) == plain
    assert await ollama(s, m, temperature=0, repeat_penalty=50, repeat_last_n=1) != \
        await ollama(s, m, temperature=0, repeat_penalty=50, repeat_last_n=64)


PROMPTS = ["Name a color.", "What is 2+2? Answer with a number.", "Say hello.", "hi", "Tell me a story about a cat."]


async def test_openai_penalties_count_only_the_tokens_sampled(serve, demo_backend):
    """OpenAI's penalties: mu[j] - c[j] * frequency - (c[j] > 0) * presence, c[j] how often token j was
    sampled before this position. Nothing is sampled before the first token, so it is the greedy one; the
    prompt's words (and the end-of-turn token its template closes earlier turns with) are not penalised."""
    s = await serve(backend=demo_backend)
    m = demo_backend.model_id
    for prompt in PROMPTS:
        first = []
        for kw in ({}, {"presence_penalty": 2}, {"frequency_penalty": 2}):
            j = await post(s, "/v1/chat/completions", {"model": m, "messages": [{"role": "user", "content": prompt}],
                                                       "max_tokens": 1, "temperature": 0, **kw})
            first.append(j["choices"][0]["message"]["content"])
        assert first[1:] == [first[0]] * 2, (prompt, first)


def test_openai_penalties_reach_back_over_the_whole_answer():
    """Every token of the answer counts, however long ago it was sampled (mlx-lm's own processors look 20
    tokens back, the prompt's included)."""
    import mlx.core as mx

    from tinytitan.engine.backends.mlx import answer_penalties

    prompt = [1, 2, 3]
    answer = [5, 7, 5] + [9] * 30
    logits = answer_penalties(len(prompt), 0.5, 1.0)(mx.array(prompt + answer), mx.zeros((1, 12)))
    assert logits[0].tolist() == [0, 0, 0, 0, 0, -2.5, 0, -1.5, 0, -30.5, 0, 0]


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    from tinytitan.engine.backends.mlx import MLXBackend

    return MLXBackend(smollm2_dir, "smollm2")


async def test_openai_penalties_leave_the_prompts_words_alone(serve, smollm2):
    """The real model's greedy answers ("The color I'm …", "The answer is 4.") take none of their first three
    tokens twice, so penalties on sampled tokens cannot change them; penalising the prompt's words (" color",
    " is") and its end-of-turn token did ("The most obvious …", "The answer to this classic math problem …")."""
    s = await serve(backend=smollm2)
    for prompt in ("Name a color.", "What is 2+2? Answer with a number."):
        answers = []
        for kw in ({}, {"presence_penalty": 2}, {"frequency_penalty": 2}):
            j = await post(s, "/v1/chat/completions", {"model": "smollm2", "max_tokens": 3, "temperature": 0,
                                                       "messages": [{"role": "user", "content": prompt}], **kw})
            answers.append(j["choices"][0]["message"]["content"])
        assert answers[1:] == [answers[0]] * 2, (prompt, answers)
