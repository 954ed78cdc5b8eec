"""A prompt cache folder that cannot be written (read-only, a full disk) is warned of once, with its reason and no
traceback (disk_writer.py ``Failing``): every generation stores its prefix, and each failed write logged a warning
with a traceback. Writing goes on being tried, the prompt cache serving from memory meanwhile; a write that
succeeds again, or fails for another reason, is said once."""

from __future__ import annotations

import errno
import logging

import numpy as np

from tinytitan.engine.cache import disk as disk_module
from tinytitan.engine.cache.disk import PromptDisk
from tinytitan.engine.cache.memory import PromptCache


def _kv(n):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 2, n, 64)), mx.zeros((1, 2, n, 64)))
    return [c]


class Disk:
    """``save_whole`` failing as the disk says (``failure``: an exception to raise; None: written)."""

    def __init__(self, monkeypatch):
        self.failure: BaseException | None = None
        real = disk_module.save_whole

        def save_whole(snap, meta, tmp, path):
            if self.failure is not None:
                raise self.failure
            real(snap, meta, tmp, path)

        monkeypatch.setattr(disk_module, "save_whole", save_whole)


def records(caplog, level=logging.WARNING):
    return [r for r in caplog.records if r.name == "tinytitan.cache" and r.levelno >= level]


def test_a_folder_that_cannot_be_written_is_warned_of_once_a_reason(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.cache")
    disk = Disk(monkeypatch)
    cache = PromptCache(1 << 30)
    cache.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    turns = iter(range(100))

    def generations(k):  # each stores its prefix, as the model thread does after a generation
        for _ in range(k):
            tokens = list(np.arange(100) + 1000 * next(turns))
            cache.store(tokens, _kv(len(tokens)))
            assert cache.disk.flush()
            assert cache.fetch(tokens + [7])[1] == len(tokens)  # served from memory meanwhile

    disk.failure = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".x.1.ab12cd34.tmp.safetensors"))
    generations(5)
    [full] = records(caplog)
    assert "No space left on device" in full.getMessage() and str(tmp_path) in full.getMessage()
    assert not full.exc_info  # (a traceback only with debug logging)

    disk.failure = RuntimeError("[write] Unable to write 8 bytes to file.")  # (mlx's words for it: another reason)
    generations(2)
    disk.failure = RuntimeError("[write] Unable to write 4096 bytes to file.")  # (the same)
    generations(2)
    assert len(records(caplog)) == 2 and "Unable to write" in records(caplog)[1].getMessage()

    caplog.clear()
    disk.failure = None  # room again: said once, and written
    generations(2)
    assert [r.getMessage() for r in records(caplog, logging.INFO) if "written" in r.getMessage()] == [
        f"prompt cache on disk: prefixes are written to {tmp_path} again"]
    assert records(caplog) == [] and cache.disk.stats()["writes"] == 2
    disk.failure = PermissionError(errno.EACCES, "Permission denied")  # failing again after that: said again
    generations(3)
    assert len(records(caplog)) == 1 and "Permission denied" in records(caplog)[0].getMessage()


def test_a_traceback_where_debug_logging_is_on(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="tinytitan.cache")
    Disk(monkeypatch).failure = OSError(errno.EROFS, "Read-only file system")
    disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    for k in range(3):
        disk.put(np.arange(100) + 1000 * k, _kv(100), ())
        assert disk.flush()
    [warned] = records(caplog)
    assert warned.exc_info and "Read-only file system" in warned.getMessage()
