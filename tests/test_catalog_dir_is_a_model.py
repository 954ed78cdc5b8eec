"""``--models-dir DIR`` where DIR is itself a model directory (a common slip for ``--model DIR``): the model is named
by its folder, as ``--model`` names it, never '.', an id no client can fetch (``GET /v1/models/.`` is the list)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tinytitan.demo_model import ensure_demo_model
from tinytitan.engine.backends.mlx import MLXBackend
from tinytitan.models.resolve import list_models


async def test_a_models_dir_that_is_a_model_is_named_by_its_folder(serve, tmp_path, monkeypatch):
    d = tmp_path / "Qwen3-demo"
    shutil.copytree(ensure_demo_model(), d)
    assert [m.model_id for m in list_models(d)] == ["Qwen3-demo"]
    monkeypatch.chdir(d)  # --models-dir .
    assert [m.model_id for m in list_models(Path("."))] == ["Qwen3-demo"]
    found = list_models(d)
    s = await serve(backend=[MLXBackend(m.path, m.model_id, lazy=True) for m in found])
    async with httpx.AsyncClient(timeout=60) as c:
        listed = [m["id"] for m in (await c.get(s.url("/v1/models"))).json()["data"]]
        one = await c.get(s.url("/v1/models/" + listed[0]))
    assert one.status_code == 200 and one.json().get("id") == listed[0], one.text
