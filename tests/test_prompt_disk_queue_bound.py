"""The snapshots waiting for the prompt disk's writer are bounded: each keeps its KV alive after the prompt cache
let it go, so a writer behind (a large model's weights hashed on first use, a slow disk) while distinct prompts
kept coming held a copy of each until memory ran out. Past the bound the oldest waiting are dropped, unwritten."""

from __future__ import annotations

import threading

import numpy as np


def _kv(n):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 2, n, 64)), mx.zeros((1, 2, n, 64)))
    return [c]


def test_the_snapshots_waiting_to_be_written_hold_at_most_their_bound(tmp_path, monkeypatch, caplog):
    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.cache.entries import kv_bytes

    one = kv_bytes(_kv(100))
    disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30, queued_bytes=int(one * 2.5))
    busy, real_scan = threading.Event(), PromptDisk._scan
    monkeypatch.setattr(PromptDisk, "_scan", lambda self: (busy.wait(30), real_scan(self))[1])  # the writer behind
    conversations = [np.arange(100) + 1000 * k for k in range(6)]  # distinct prompts: none supersedes another
    for tokens in conversations:
        disk.put(tokens, _kv(100), ())
    assert disk.waiting == 2
    assert "the writer is behind" in caplog.text
    busy.set()
    assert disk.flush()
    assert sorted(int(f.tokens[0]) for f in disk._index.values()) == [4000, 5000]  # the newest


def test_a_prefix_queued_again_is_the_newest_waiting():
    """A newer snapshot of a prefix already waiting (one that cannot be trimmed back: nothing supersedes it) replaces
    the older and goes to the back of the queue, as the newest: it kept the older one's place, and past the bound it
    was dropped first, the freshest work lost while older prefixes were written."""
    from tinytitan.engine.cache.disk_writer import Writer

    busy, written = threading.Event(), []
    w = Writer(lambda: busy.wait(30), written.append, "test-writer", max_bytes=2)  # (the writer behind)
    w.start()
    try:
        w.put(b"a", "a, older", nbytes=1)
        w.put(b"b", "b", nbytes=1)
        w.put(b"a", "a, newer", nbytes=1)
        w.put(b"c", "c", nbytes=1)  # over the bound: the oldest waiting goes
        assert w.waiting == 2 and w.dropped == 1
    finally:
        busy.set()
    assert w.flush(10)
    assert written == ["a, newer", "c"]
