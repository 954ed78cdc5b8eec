"""Requests that would cost everyone else: stop strings without a bound; Ollama windows past int32."""

from __future__ import annotations

import time

import httpx


USER = [{"role": "user", "content": "Tell me a story about a cat."}]


async def test_a_repeat_last_n_past_int32_is_not_a_500(serve, demo_backend):
    """Ollama's repeat_last_n is only bounded below (-1); a window past the context is the whole context."""
    s = await serve(backend=demo_backend)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/api/chat"), json={
            "model": demo_backend.model_id, "messages": USER, "stream": False,
            "options": {"num_predict": 3, "repeat_penalty": 1.5, "repeat_last_n": 2 ** 40}})
    assert r.status_code == 200, r.text  # observed: 500 {"error": "generation failed: Slice indices must be 32-bit integers."}


async def test_many_stop_strings_are_refused_by_name(serve):
    """A 3 MB Ollama/Anthropic body of 300 000 stop strings was accepted; each generated token then scanned every
    one of them on the decoding thread (~10 ms a token), slowing every row of the batch (observed: 31 s for 1000
    tokens of the scripted backend, 10x slower decoding for a concurrent request on the demo model)."""
    s = await serve(script=["word " * 2000] * 3)
    stops = [f"z{i}" for i in range(300_000)]
    async with httpx.AsyncClient(timeout=300) as c:
        t = time.perf_counter()
        r = await c.post(s.url("/v1/messages"), json={"model": "tinytitan-scripted", "max_tokens": 1000,
                                                       "messages": USER, "stop_sequences": stops})
        assert r.status_code == 400 and "stop_sequences" in r.text, (r.status_code, time.perf_counter() - t)
        r = await c.post(s.url("/api/chat"), json={"model": "tinytitan-scripted", "messages": USER, "stream": False,
                                                   "options": {"num_predict": 1000, "stop": stops}})
        assert r.status_code == 400 and "options.stop" in r.text, r.text[:200]
        r = await c.post(s.url("/v1/messages"), json={"model": "tinytitan-scripted", "max_tokens": 10,
                                                       "messages": USER, "stop_sequences": stops[:256]})
        assert r.status_code == 200, r.text
