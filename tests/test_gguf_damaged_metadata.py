"""A GGUF whose header is damaged in a way the header reader cannot see (a zero head count, a merge naming a
token the vocabulary lacks) is refused by name — one line at start, a catalog leaving it out — never a
traceback from inside the converter."""

from __future__ import annotations

import mlx.core as mx
import pytest

from gguf_util import cache, demo_dir, make_gguf  # noqa: F401
from cli_helpers import serve_fails
from tinytitan.models import gguf
from tinytitan.models.resolve import ModelNotFound, list_models, resolve

DAMAGE = {
    "no-heads": {"qwen3.attention.head_count": mx.array(0, dtype=mx.uint32)},
    "merge-out-of-vocabulary": "merges",
}


def damaged(tmp_path, demo_dir, kind, name="m.gguf"):
    change = DAMAGE[kind]
    if change == "merges":
        from gguf_util import tokenizer_metadata

        merges = tokenizer_metadata(demo_dir)["tokenizer.ggml.merges"]
        change = {"tokenizer.ggml.merges": merges + ["\u00a7notatoken \u00a7neither"]}
    path, _, _ = make_gguf(tmp_path / name, demo_dir, **change)
    return path


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_metadata_is_refused_by_name(tmp_path, demo_dir, cache, kind):
    path = damaged(tmp_path, demo_dir, kind)
    with pytest.raises(gguf.UnsupportedGGUF, match="m.gguf"):
        gguf.ensure_converted(path, "float32")
    with pytest.raises(ModelNotFound, match="m.gguf"):
        resolve(str(path), "float32")


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_catalog_leaves_out_damaged_metadata(tmp_path, demo_dir, cache, kind):
    root = tmp_path / "models"
    root.mkdir()
    make_gguf(root / "good.gguf", demo_dir)
    damaged(root, demo_dir, kind, "bad.gguf")
    assert [m.model_id for m in list_models(root, "float32")] == ["good"]


def test_serve_says_one_line(tmp_path, demo_dir, cache):
    path = damaged(tmp_path, demo_dir, "no-heads")
    done = serve_fails(tmp_path, "--model", str(path), "--gguf-form", "float32")
    assert "m.gguf" in done.stderr


def test_a_config_transformers_refuses_is_one_line(tmp_path, demo_dir, cache):
    """It converts (the header is readable), and transformers' strict config class refuses the hidden size
    at load with an error that is not a ValueError."""
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir, "llama",
                           **{"llama.embedding_length": mx.array(7, dtype=mx.uint32)})
    done = serve_fails(tmp_path, "--model", str(path), "--gguf-form", "float32")
    assert "cannot load the model" in done.stderr


def test_a_wrong_layer_count_is_one_short_line(tmp_path, demo_dir, cache):
    """mlx-lm names every parameter the weights lack (hundreds for a layer count of 99): the start-up message
    keeps the head of that, not a screenful."""
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir, **{"qwen3.block_count": mx.array(99, dtype=mx.uint32)})
    done = serve_fails(tmp_path, "--model", str(path), "--gguf-form", "float32")
    said = [line for line in done.stderr.splitlines() if "cannot" in line]
    assert said and len(said[-1]) < 700 and "characters)" in said[-1], done.stderr[-3000:]


@pytest.mark.parametrize("given", [0, None])
def test_a_context_length_of_0_or_none_is_the_documented_default_said(tmp_path, demo_dir, cache, caplog, given):
    """A file that does not say its context (context_length 0, or no key) is served with a window of
    DEFAULT_CONTEXT tokens, said in the log; not a window of 0 (or of whatever the backend falls back to)."""
    import json
    import logging

    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.models.gguf_rope import DEFAULT_CONTEXT

    value = None if given is None else mx.array(given, dtype=mx.uint32)
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir, **{"qwen3.context_length": value})
    caplog.set_level(logging.WARNING, logger="tinytitan.gguf")
    out = gguf.ensure_converted(path, "float32")
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == DEFAULT_CONTEXT == 4096
    assert MLXBackend(out, "m", lazy=True).context_window == DEFAULT_CONTEXT
    assert f"m.gguf: qwen3.context_length is {'missing' if given is None else given}" in caplog.text
    assert f"a context window of {DEFAULT_CONTEXT} tokens is assumed" in caplog.text
