"""A library's manifests that cannot be served (a layer's blob missing after an interrupted pull, parameters that
are not a JSON object) are left out and said, by name; the healthy ones are served; never a traceback that keeps
the server from starting."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from gguf_util import tokenizer_metadata, write_gguf
from test_model_libraries import CONFIG, blob, manifest
from tinytitan.demo_model import ensure_demo_model
from tinytitan.models.resolve import list_models


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))


def _gguf(tmp_path, with_template=True) -> bytes:
    from mlx.core import load as mx_load

    demo = ensure_demo_model()
    meta = tokenizer_metadata(demo)
    if not with_template:
        meta.pop("tokenizer.chat_template")
    return write_gguf(tmp_path / "m.gguf", mx_load(str(demo / "model.safetensors")),
                      json.loads((demo / "config.json").read_text()), "qwen3", meta).read_bytes()


def _missing(kind: str) -> tuple[str, dict]:
    data = f"not on disk: {kind}".encode()
    return kind, {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


@pytest.mark.parametrize("kind", ["params", "system", "messages", "template"])
def test_a_manifest_naming_a_missing_blob_is_left_out_with_a_warning(tmp_path, cache, caplog, kind):
    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    gguf = blob(root, _gguf(tmp_path))
    bare = blob(root, _gguf(tmp_path, with_template=False)) if kind == "template" else gguf  # reads its template
    cfg = blob(root, json.dumps(CONFIG).encode())
    manifest(root, "registry.ollama.ai/library/good/latest", [("model", gguf)], cfg, 1_700_000_000)
    manifest(root, "registry.ollama.ai/library/bad/latest", [("model", bare), _missing(kind)], cfg, 1_700_000_000)
    caplog.set_level(logging.WARNING, logger="tinytitan.models")
    found = list_models(root, "float32")  # observed: FileNotFoundError, the whole listing (server start) fails
    assert [m.model_id for m in found] == ["good"]
    assert "bad:latest" in caplog.text


def test_a_params_blob_that_is_not_json_is_left_out_with_a_warning(tmp_path, cache, caplog):
    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    gguf = blob(root, _gguf(tmp_path))
    cfg = blob(root, json.dumps(CONFIG).encode())
    manifest(root, "registry.ollama.ai/library/good/latest", [("model", gguf)], cfg, 1_700_000_000)
    manifest(root, "registry.ollama.ai/library/bad/latest", [("model", gguf), ("params", blob(root, b"{oops"))],
             cfg, 1_700_000_000)
    caplog.set_level(logging.WARNING, logger="tinytitan.models")
    assert [m.model_id for m in list_models(root, "float32")] == ["good"]
