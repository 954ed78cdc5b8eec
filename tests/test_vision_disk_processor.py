"""The prompt cache on disk never gives a vision model the KV of an image its processor now makes otherwise: the
same weights with another processor configuration (a Qwen2.5-VL's ``max_pixels`` lowered, then a restart; or a
copy of the model so configured beside it) turn the same image into other tokens and embeddings, which the ids
alone cannot tell apart (an image is keyed by its bytes' digest)."""

from __future__ import annotations

import json
import shutil

import pytest

from tinytitan.chat_request import Message
from tinytitan.model_setup import attach_prompt_disk

from vision_helpers import engine_logits, ask, decode, part, png


@pytest.fixture(scope="module")
def two_processors(tmp_path_factory):
    """A tiny Qwen2.5-VL, and a copy of it (the same weights) whose processor keeps images under 224×224."""
    import vision_models

    root = tmp_path_factory.mktemp("qwen-two-processors")
    full = vision_models.build_qwen2_5_vl(root / "full")
    small = root / "small"
    shutil.copytree(full, small)
    config = json.loads((small / "preprocessor_config.json").read_text())
    (small / "preprocessor_config.json").write_text(json.dumps({**config, "max_pixels": 224 * 224}))
    return full, small


def _served(path, directory):
    """A vision backend as ``tinytitan serve`` makes it, its prompt cache on ``directory``."""
    from tinytitan.engine.backends.vision import VisionBackend

    class Args:
        prompt_cache_dir, prompt_cache_disk_mib, script, group = str(directory), 100, None, None

    backend = VisionBackend(path, "qwen-vl-tiny")
    backend.ensure_loaded()
    attach_prompt_disk([backend], Args())
    return backend


def test_an_image_another_processor_configuration_read_is_encoded_again(two_processors, tmp_path):
    import mlx.core as mx

    full, small = two_processors
    question = "What is it? " + "Say what you see in it, the colours and the shapes. " * 3
    first = ask(part(png((255, 0, 0), (448, 448))), question, model="qwen-vl-tiny")
    before = _served(full, tmp_path)
    decode(before, first)  # 256 image tokens
    assert before.prompt_cache.disk.flush()

    after = _served(small, tmp_path)  # the same weights, the same directory: 64 tokens for that image
    follow = ask("Why?", model="qwen-vl-tiny", history=(first.messages[0], Message("assistant", "A red box.")))
    mine, _ = engine_logits(after, after.prepare(follow), [3])
    assert after.encoded_images == 1, "the image's KV of another processor configuration was read back"
    assert after.prompt_cache.disk.reads == 0
    decode(after, follow)  # its own prefix, written beside the other's
    assert after.prompt_cache.disk.flush()

    again = _served(small, tmp_path)  # its own files are still read back after a restart
    scratch = _served(small, tmp_path / "none")
    expected, _ = engine_logits(scratch, scratch.prepare(follow), [3])
    got, _ = engine_logits(again, again.prepare(follow), [3])
    assert again.prompt_cache.disk.reads == 1 and again.encoded_images == 0
    for a, b in zip(mine + got, expected + expected):
        assert float(mx.abs(a - b).max()) < 1e-4
