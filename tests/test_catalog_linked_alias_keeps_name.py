"""A link beside the model folder it names (``latest -> Qwen3-demo``) does not rename the model: a folder
reachable without following a link keeps that name, whatever order the filesystem lists them in (a client naming
``Qwen3-demo`` would otherwise get a 404)."""

from __future__ import annotations

import os
import shutil

import pytest

from tinytitan.demo_model import ensure_demo_model
from tinytitan.model_setup import find_model_dirs
from tinytitan.models.resolve import list_models


@pytest.mark.parametrize("link", ["latest", "b", "current", "a"])
def test_a_link_beside_a_model_folder_does_not_rename_it(tmp_path, link):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(ensure_demo_model(), models / "Qwen3-demo")
    os.symlink(models / "Qwen3-demo", models / link)
    assert "Qwen3-demo" in [m.model_id for m in list_models(models)]
    assert models / "Qwen3-demo" in find_model_dirs(models)
