"""``ollama stop NAME`` (Open WebUI's unload button) sends the load request with keep_alive 0: a request to let
the model go. It does not make NAME resident (evicting the model in use and paying a full load)."""

from __future__ import annotations

import ollama

from test_ollama_load_request_loads import models_dir  # noqa: F401 (fixture)
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
