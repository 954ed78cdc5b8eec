"""A disk that fills while a GGUF is converted is the disk's fault, not the file's: mlx's safetensors writer
raises RuntimeError ('[write] Unable to write …'), not OSError, and memory running out raises MemoryError;
neither may be reported as 'damaged or inconsistent GGUF metadata' (nor the file left out of a catalog as
such)."""

from __future__ import annotations

import os

import mlx.core as mx
import pytest

from gguf_util import cache, demo_dir, make_gguf  # noqa: F401
from tinytitan.models import gguf


def test_a_full_disk_is_not_a_damaged_file(tmp_path, demo_dir, cache, monkeypatch):
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir)
    real = mx.save_safetensors

    def to_full_disk(file, arrays, metadata=None):  # the shard's bytes go to /dev/full: ENOSPC on write
        link = os.path.join(os.path.dirname(file), "full.safetensors")
        os.symlink("/dev/full", link)
        try:
            real(link, arrays, metadata=metadata)
        finally:
            os.unlink(link)

    monkeypatch.setattr(mx, "save_safetensors", to_full_disk)
    with pytest.raises(Exception) as got:
        gguf.ensure_converted(path, "float32")
    assert "damaged" not in str(got.value), f"{type(got.value).__name__}: {got.value}"


def test_memory_running_out_is_not_a_damaged_file(tmp_path, demo_dir, cache, monkeypatch):
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir)

    def no_memory(*a, **k):
        raise MemoryError()

    monkeypatch.setattr(gguf, "build_tokenizer", no_memory)
    with pytest.raises(BaseException) as got:
        gguf.ensure_converted(path, "float32")
    assert "damaged" not in str(got.value), f"{type(got.value).__name__}: {got.value}"
