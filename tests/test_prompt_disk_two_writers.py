"""Two servers writing the same prefix to one directory at once (replicas on a shared volume, whose process ids
are alike: each is pid 1 in its container) never write into one temporary file: a file renamed into place while
the other still writes into it (truncated, then written at other offsets under another header) would be read
back as good."""

from __future__ import annotations

import base64
import threading

import numpy as np


def test_two_writers_of_one_prefix_never_share_a_temporary_file(tmp_path, monkeypatch):
    import mlx.core as mx
    import mlx_lm.models.cache as mlx_cache
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.cache.disk_files import read_metadata

    real, both_in, names = mlx_cache.save_prompt_cache, threading.Barrier(2, timeout=10), []

    def save(name, cache, metadata=None):
        names.append(name)
        both_in.wait()  # both writes in progress at once
        real(name, cache, metadata)

    monkeypatch.setattr(mlx_cache, "save_prompt_cache", save)
    tokens = np.arange(1000, 1100)
    disks = [PromptDisk(tmp_path, [], lambda: "layout", 1 << 30) for _ in range(2)]  # (one process: one pid)
    for disk in disks:
        kv = KVCache()
        kv.update_and_fetch(mx.zeros((1, 2, len(tokens), 16)), mx.zeros((1, 2, len(tokens), 16)))
        disk.put(tokens, [kv], ())
    assert all(disk.flush() for disk in disks)
    assert len(names) == 2 and names[0] != names[1]
    [f] = tmp_path.glob("*.safetensors")
    held = np.frombuffer(base64.b64decode(read_metadata(f)["tinytitan_tokens"]), dtype=np.int32)
    assert np.array_equal(held, tokens)
    assert not list(tmp_path.glob(".*"))
