"""``--models-dir`` follows linked folders (a model folder linked into a models folder, as people keep one copy
of a model for several tools); a link back up the tree is walked once, not forever."""

from __future__ import annotations

import os
import shutil

from tinytitan.demo_model import ensure_demo_model
from tinytitan.model_setup import find_model_dirs
from tinytitan.models.resolve import list_models


def test_a_linked_model_folder_is_listed(tmp_path):
    store = tmp_path / "store" / "Qwen3-demo"
    shutil.copytree(ensure_demo_model(), store)
    models = tmp_path / "models"
    (models / "team").mkdir(parents=True)
    os.symlink(store, models / "team" / "demo")
    os.symlink(models, models / "team" / "loop")  # a link back up: walked once
    assert [m.model_id for m in list_models(models)] == ["team/demo"]
    assert find_model_dirs(models) == [models / "team" / "demo"]
