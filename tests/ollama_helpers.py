"""Ollama's test helpers: a library laid out as Ollama keeps it (blob: a layer's bytes under their digest;
manifest: a model's manifest, its layers and config, at a given time; CONFIG: a GGUF model's config layer),
and the models_dir fixture: a directory of two demo models, alpha and beta."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tinytitan.demo_model import build_demo_model


CONFIG = {"model_format": "gguf", "model_family": "qwen3", "model_families": ["qwen3"], "model_type": "3.37M",
          "file_type": "F32", "architecture": "amd64", "os": "linux"}


def blob(root, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (root / "blobs" / digest.replace(":", "-")).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def manifest(root, name: str, layers: list[tuple[str, dict]], config: dict, mtime: float):
    host, namespace, model, tag = name.split("/")
    path = root / "manifests" / host / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
            "layers": [{"mediaType": f"application/vnd.ollama.image.{kind}", **ref} for kind, ref in layers]}
    raw = json.dumps(body).encode()
    path.write_bytes(raw)
    os.utime(path, (mtime, mtime))
    return hashlib.sha256(raw).hexdigest(), sum(ref["size"] for _, ref in layers) + config["size"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    build_demo_model(root / "alpha")
    build_demo_model(root / "beta")
    return root
