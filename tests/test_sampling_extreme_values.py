"""Extreme sampling values the APIs allow. A temperature above 0 but so small that its reciprocal overflows
float32 (below about 2.9e-39) is valid on every API (OpenAI: 0 to 2; Anthropic: 0 to 1; Ollama: any non-negative number). The draw must still be the
model's: next to greedy, and inside the output grammar — not a categorical draw over logits scaled to -inf."""

from __future__ import annotations

import httpx

USER = [{"role": "user", "content": "Tell me a story about a cat."}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
    "type": "object", "properties": {"name": {"type": "string", "enum": ["alpha-beta"]}},
    "required": ["name"], "additionalProperties": False}}}


async def chat(s, m, **kw):
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={"model": m, "messages": USER, "max_tokens": 12, **kw})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


async def test_a_vanishing_temperature_samples_the_greedy_answer(serve, demo_backend):
    s = await serve(backend=demo_backend)
    m = demo_backend.model_id
    greedy = await chat(s, m, temperature=0)
    assert await chat(s, m, temperature=1e-30, seed=1) == greedy  # 1/t is finite in float32: greedy already
    assert await chat(s, m, temperature=1e-39, seed=1) == greedy  # 1/t overflows float32


async def test_a_vanishing_temperature_keeps_to_the_output_grammar(serve, demo_backend):
    s = await serve(backend=demo_backend)
    m = demo_backend.model_id
    assert await chat(s, m, temperature=1e-39, seed=1, response_format=SCHEMA) == '{"name":"alpha-beta"}'


async def test_a_huge_ollama_temperature_keeps_to_the_output_grammar(serve, demo_backend):
    """Ollama sets no maximum temperature: one whose reciprocal is 0 in float32 draws uniformly over the tokens
    the grammar (and top_p) keep, never one they took away."""
    s = await serve(backend=demo_backend)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/api/chat"), json={
            "model": demo_backend.model_id, "messages": USER, "stream": False, "format": "json",
            "options": {"num_predict": 8, "temperature": 1e308}})
    assert r.status_code == 200, r.text
    assert r.json()["message"]["content"].startswith("{")


async def test_a_penalty_past_float32_keeps_to_the_output_grammar(serve, demo_backend):
    """Ollama bounds no penalty: one past float32's range must not push every token the grammar allows to -inf
    (the draw would then leave the grammar: a 500 from its matcher)."""
    s = await serve(backend=demo_backend)
    every = '{ {" "} [ ] : , 0 1 2 3 4 5 6 7 8 9 true false null - { " \n \t'  # the prompt holds every JSON token
    for options in ({"presence_penalty": 1e39}, {"frequency_penalty": 1e39}, {"repeat_penalty": 1e39},
                    {"presence_penalty": -1e39}):
        async with httpx.AsyncClient(timeout=60) as c:
            r = await c.post(s.url("/api/chat"), json={
                "model": demo_backend.model_id, "messages": [{"role": "user", "content": every}], "stream": False,
                "format": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                "options": {"num_predict": 10, "temperature": 0, "repeat_last_n": -1, **options}})
        assert r.status_code == 200, (options, r.text)
        assert r.json()["message"]["content"].startswith("{"), options
