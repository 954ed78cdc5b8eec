"""A model directory whose JSON files parse but hold the wrong shapes (a damaged or hand-edited download):
a config.json or generation_config.json that is not an object (mlx-lm's load reads both as objects) is that
model's refusal at start, naming the file (a catalog leaves it out and serves the others), not a traceback
that stops the server; a text_config that is not an object, or a sampling value of the wrong type or range,
is set aside, and the model answers with its fallbacks rather than a 500 on every request."""

from __future__ import annotations

import argparse
import json
import shutil

import httpx
import pytest

import strict
from tinytitan import model_setup
from tinytitan.demo_model import ensure_demo_model
from tinytitan.engine.backends.mlx import MLXBackend


def copy_demo(dest, config=None, generation=None):
    shutil.copytree(ensure_demo_model(), dest)
    if config is not None:
        (dest / "config.json").write_text(json.dumps(config(json.loads((dest / "config.json").read_text()))))
    if generation is not None:
        (dest / "generation_config.json").write_text(json.dumps(generation))
    return dest


def catalog_args(root):
    return argparse.Namespace(script=None, models_dir=str(root), model=None, model_id=None, prompt_cache_mib=64,
                              reasoning_effort=None, thinking=None)


def test_a_config_that_is_not_an_object_leaves_that_model_out_of_the_catalog(tmp_path, monkeypatch, caplog):
    copy_demo(tmp_path / "good")
    copy_demo(tmp_path / "listed", config=lambda c: [c])
    monkeypatch.setattr(model_setup, "second_engine_available", lambda: False)
    backends = model_setup.make_backends(catalog_args(tmp_path))
    assert [b.model_id for b in backends] == ["good"]
    assert "listed: not served: ValueError: config.json is not a JSON object" in caplog.text


@pytest.mark.parametrize("config, generation, named", [
    (lambda c: "qwen3", None, "config.json"), (None, [], "generation_config.json")])
def test_a_settings_file_that_is_not_an_object_is_refused_by_name(tmp_path, config, generation, named):
    with pytest.raises(ValueError, match=f"^{named} is not a JSON object"):
        MLXBackend(copy_demo(tmp_path / "m", config, generation), "m", lazy=True)


@pytest.mark.parametrize("config, generation", [
    (lambda c: {**c, "text_config": "x"}, None),                       # text_config: not an object
    (None, {"temperature": "hot", "top_p": 7, "top_k": "x"}),         # values of the wrong type or range
    (None, {"temperature": True, "top_p": 0, "top_k": 2.5}),
])
async def test_misshapen_optional_settings_are_set_aside(serve, tmp_path, config, generation):
    backend = MLXBackend(copy_demo(tmp_path / "m", config, generation), "m", lazy=True)
    assert backend.context_window > 0
    s = await serve(backend=backend)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert strict.chat_completion(r.json()).model == "m"
