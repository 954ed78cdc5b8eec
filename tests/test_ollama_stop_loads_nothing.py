"""``ollama stop NAME`` (Open WebUI's unload button) sends the load request with keep_alive 0: a request to let
the model go. It does not make NAME resident (evicting the model in use and paying a full load)."""

from __future__ import annotations

import ollama

from ollama_helpers import models_dir  # noqa: F401 (fixture)
from tinytitan.engine.backends.mlx import MLXBackend
from tinytitan.model_setup import find_model_dirs


async def test_a_stop_request_does_not_load_the_model_it_names(serve, models_dir):  # noqa: F811
    s = await serve(backend=[MLXBackend(d, d.name, lazy=True) for d in find_model_dirs(models_dir)])
    c = ollama.AsyncClient(host=s.base, timeout=120)
    await c.generate(model="alpha")  # alpha is the model in use
    assert s.engine.resident == "alpha"
    answer = await c.generate(model="beta", keep_alive=0)  # ollama stop beta
    assert answer.done
    assert s.engine.resident == "alpha"  # beta was not loaded (alpha not evicted)


def test_every_zero_duration_lets_the_model_go():
    from tinytitan.protocols.keep_alive import lets_go as _lets_go

    for zero in (0, 0.0, "0", "0s", "0m0s", "0h0m0s", "-0s", "+0s", ".0s", "0μs", "0µs", "0.0s"):
        assert _lets_go(zero), zero
    for kept in (-1, "-1", "5m", "-5m", "0.5s", "1s", "", "x", True, None):
        assert not _lets_go(kept), kept
