"""A model directory's context window: read from the config key its architecture uses, else its tokenizer's
``model_max_length``, else 32768 said in the log — never a guess without a word."""

from __future__ import annotations

import logging

import pytest

from tinytitan.engine.backends.mlx import FALLBACK_WINDOW, MLXBackend
from catalog_helpers import model_dir


def drop_window(config):
    config.pop("max_position_embeddings", None)


@pytest.mark.parametrize("key", ["seq_length", "n_positions", "max_sequence_length"])
def test_another_architectures_key_gives_the_window(tmp_path, key):
    def edit(config):
        drop_window(config)
        config[key] = 2048

    assert MLXBackend(model_dir(tmp_path, edit), "m", lazy=True).context_window == 2048


def test_the_tokenizers_length_is_the_window_where_the_config_has_none(tmp_path, caplog):
    path = model_dir(tmp_path, drop_window, lambda tc: tc.update(model_max_length=8192))
    with caplog.at_level(logging.WARNING, logger="tinytitan.mlx"):
        assert MLXBackend(path, "m", lazy=True).context_window == 8192
    assert "model_max_length" in caplog.text


def test_a_window_nothing_gives_is_assumed_and_said(tmp_path, caplog):
    path = model_dir(tmp_path, drop_window, lambda tc: tc.update(model_max_length=int(1e30)))
    with caplog.at_level(logging.WARNING, logger="tinytitan.mlx"):
        assert MLXBackend(path, "m", lazy=True).context_window == FALLBACK_WINDOW
    assert f"assuming {FALLBACK_WINDOW} tokens" in caplog.text
