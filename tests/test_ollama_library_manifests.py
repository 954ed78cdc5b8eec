"""A library's manifests that cannot be served (a layer's blob missing after an interrupted pull, parameters that
are not a JSON object) are left out and said, by name; the healthy ones are served; never a traceback that keeps
the server from starting."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from gguf_util import demo_gguf_bytes
from gguf_util import cache  # noqa: F401  (the conversions' cache, per test)
from ollama_helpers import CONFIG, blob, manifest
from tinytitan.models.resolve import list_models


def _missing(kind: str) -> tuple[str, dict]:
    data = f"not on disk: {kind}".encode()
    return kind, {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


@pytest.mark.parametrize("kind", ["params", "system", "messages", "template"])
def test_a_manifest_naming_a_missing_blob_is_left_out_with_a_warning(tmp_path, cache, caplog, kind):
    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    gguf = blob(root, demo_gguf_bytes(tmp_path))
    bare = blob(root, demo_gguf_bytes(tmp_path, with_template=False)) if kind == "template" else gguf  # (its template: read)
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
    gguf = blob(root, demo_gguf_bytes(tmp_path))
    cfg = blob(root, json.dumps(CONFIG).encode())
    manifest(root, "registry.ollama.ai/library/good/latest", [("model", gguf)], cfg, 1_700_000_000)
    manifest(root, "registry.ollama.ai/library/bad/latest", [("model", gguf), ("params", blob(root, b"{oops"))],
             cfg, 1_700_000_000)
    caplog.set_level(logging.WARNING, logger="tinytitan.models")
    assert [m.model_id for m in list_models(root, "float32")] == ["good"]


def test_a_layer_ollama_never_reads_may_lack_its_blob(tmp_path, cache):
    """Only the layers Ollama's own loader reads fail a model there when their blob is missing."""
    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    gguf = blob(root, demo_gguf_bytes(tmp_path))
    cfg = blob(root, json.dumps(CONFIG).encode())
    manifest(root, "registry.ollama.ai/library/odd/latest", [("model", gguf), _missing("future-kind")], cfg,
             1_700_000_000)
    assert [m.model_id for m in list_models(root, "float32")] == ["odd"]
