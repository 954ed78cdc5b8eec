"""Ollama's load request (an /api/generate with no prompt, an /api/chat with no messages: `ollama run`'s
preload, ``ollama.generate(model)``, Open WebUI's warm-up) makes the named model resident before it answers
``done_reason: "load"``, as Ollama's handlers schedule the runner before they look at the prompt: with
``--models-dir`` the named model is the resident one afterwards, and ``/api/ps`` lists it."""

from __future__ import annotations

import ollama
import pytest

from tinytitan.engine.backends.mlx import MLXBackend
from tinytitan.model_setup import find_model_dirs
from ollama_helpers import models_dir  # noqa: F401  (the fixture)


@pytest.mark.parametrize("route", ["chat", "generate"])
async def test_the_load_request_makes_the_model_resident(serve, models_dir, route):
    s = await serve(backend=[MLXBackend(d, d.name, lazy=True) for d in find_model_dirs(models_dir)])
    c = ollama.AsyncClient(host=s.base, timeout=120)
    assert s.engine.resident is None
    answer = await (c.chat(model="beta") if route == "chat" else c.generate(model="beta"))
    assert answer.done_reason == "load"
    assert s.engine.resident == "beta"
    assert [m.model for m in (await c.ps()).models] == ["beta:latest"]


async def test_the_load_request_of_the_resident_model_does_not_wait_for_generations(serve):
    """The model already resident: the load request answers at once, beside a generation in flight."""
    import trio

    s = await serve([{"output": " ".join(["word"] * 60), "delay_ms": 150}])  # 9 s of decoding
    c = ollama.AsyncClient(host=s.base, timeout=60)
    async with trio.open_nursery() as n:
        n.start_soon(lambda: c.chat(model="tinytitan-scripted", messages=[{"role": "user", "content": "hi"}]))
        with trio.fail_after(20):
            while s.engine.running == 0:  # the generation is decoding
                await trio.sleep(0.01)
        answer = await c.generate(model="tinytitan-scripted")
        assert answer.done_reason == "load" and s.engine.running == 1  # answered while the generation still runs
        n.cancel_scope.cancel()
