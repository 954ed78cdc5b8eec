"""``--models-dir`` holding a model directory and a GGUF of the same name (``Tiny/`` beside ``Tiny.gguf``): the GGUF
is not converted for nothing and dropped unsaid; it is left out with a warning naming the model that has its name."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import mlx.core as mx

from gguf_util import tokenizer_metadata, write_gguf
from tinytitan.demo_model import build_demo_model, ensure_demo_model
from tinytitan.models.resolve import list_models


def test_a_gguf_whose_name_is_taken_is_said_and_not_converted(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    caplog.set_level(logging.WARNING, logger="tinytitan.models")
    demo = Path(ensure_demo_model())
    root = tmp_path / "models"
    build_demo_model(root / "Tiny")
    write_gguf(root / "Tiny.gguf", mx.load(str(demo / "model.safetensors")),
               json.loads((demo / "config.json").read_text()), "qwen3", tokenizer_metadata(demo))
    found = list_models(root, "float32")
    assert [(m.model_id, m.path) for m in found] == [("Tiny", root / "Tiny")]
    assert not list((tmp_path / "cache").rglob("config.json")), "the GGUF was converted, then not served"
    assert any("Tiny.gguf" in r.getMessage() and "not served" in r.getMessage() for r in caplog.records)
