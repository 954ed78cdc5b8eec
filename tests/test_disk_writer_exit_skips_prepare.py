"""At exit the prompt disk's writer waits for the queued writes (disk_writer.py), not for ``prepare`` where
nothing is queued: the weights' digest reads every weight file on a model's first start (tens of seconds for a
large model), and Ctrl-C would hang, silently, up to EXIT_WAIT_S. ``prepare`` runs no mlx code: nothing at exit
needs to wait for it."""

from __future__ import annotations

import threading
import time

from tinytitan.engine.cache.disk_writer import Writer


def test_exit_with_nothing_queued_does_not_wait_for_prepare():
    release = threading.Event()

    def prepare() -> bool:  # the weights' digest of a large model, read for the first time
        release.wait(5)
        return True

    w = Writer(prepare, lambda item: None, "test-writer")
    w.start()
    try:
        started = time.monotonic()
        w.close(timeout=4)
        assert time.monotonic() - started < 1
    finally:
        release.set()
