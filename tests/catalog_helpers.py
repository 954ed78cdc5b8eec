"""The model directories' test helpers: a copy of the demo model with its config (and tokenizer config) edited
(model_dir), a directory of demo models (the models_dir fixture: alpha, org/beta, and a directory without
weights, not listed), and backends whose load fails: as a group broken during it (GroupDiesOnLoad), and as
weights damaged on disk (DamagedWeights); USER: one user turn."""

from __future__ import annotations

import json
import shutil

import pytest

from tinytitan.demo_model import build_demo_model, ensure_demo_model
from tinytitan.engine.backends.scripted import ScriptedBackend
from tinytitan.engine.group.ranks import GroupBroken


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    build_demo_model(root / "alpha")
    build_demo_model(root / "org" / "beta")
    (root / "not-a-model").mkdir()
    (root / "not-a-model" / "config.json").write_text("{}")  # no weights: not listed
    return root


# a load that breaks a group of processes keeps its own words: 503 group_broken (a load balancer retries it)
class GroupDiesOnLoad(ScriptedBackend):
    """group.load's gather_text/_sum raise GroupBroken when a rank dies during a switch of models."""

    @property
    def loaded(self) -> bool:
        return False

    def ensure_loaded(self):
        raise GroupBroken("rank 0 lost rank 1: [ring] connection reset by peer")


USER = [{"role": "user", "content": "hi"}]


class DamagedWeights(ScriptedBackend):
    @property
    def loaded(self) -> bool:
        return False

    def ensure_loaded(self):
        raise RuntimeError("[load_safetensors] invalid data offsets: an incomplete download")


def model_dir(tmp_path, config_edit, tokenizer_edit=None):
    src = ensure_demo_model()
    out = tmp_path / "m"
    out.mkdir()
    for f in src.iterdir():
        if f.name == "model.safetensors":
            (out / f.name).symlink_to(f)
        else:
            shutil.copy(f, out / f.name)
    config = json.loads((out / "config.json").read_text())
    config_edit(config)
    (out / "config.json").write_text(json.dumps(config))
    if tokenizer_edit is not None:
        tc = json.loads((out / "tokenizer_config.json").read_text())
        tokenizer_edit(tc)
        (out / "tokenizer_config.json").write_text(json.dumps(tc))
    return out
