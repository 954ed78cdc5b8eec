"""serve --models-dir DIR --model-id NAME: NAME spelt as the server itself takes a model's name (``x:latest``, the tag
``ollama list`` shows and requests may use) picks that model, as a request naming it is served."""

from __future__ import annotations

import argparse

from catalog_helpers import models_dir  # noqa: F401


def test_model_id_with_latest_tag_picks_the_model(models_dir, monkeypatch):  # noqa: F811
    from tinytitan import model_setup

    monkeypatch.setattr(model_setup, "second_engine_available", lambda: False)
    args = argparse.Namespace(script=None, models_dir=str(models_dir), model=None, model_id="org/beta:latest",
                              prompt_cache_mib=64, reasoning_effort=None, thinking=None)
    assert [b.model_id for b in model_setup.make_backends(args)][0] == "org/beta"
