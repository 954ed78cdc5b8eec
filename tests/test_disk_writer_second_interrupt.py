"""A second Ctrl-C while the exit waits for the prompt disk's queued writes (disk_writer.py) stops the wait: the
queued writes are dropped, and where one is still inside mlx the process ends at once (``exit_now``) instead of
the interrupt escaping the ``atexit`` handler and the interpreter finalizing around that write (an abort, exit
134). The interrupt is Python's own SIGINT handling (``_thread.interrupt_main``), no signal sent to the process."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import pytest

from tinytitan.engine.cache import disk_writer
from tinytitan.engine.cache.disk_writer import Writer


@pytest.fixture(autouse=True)
def python_handles_sigint():
    """Python's own Ctrl-C handling, which ``interrupt_main`` runs: a process started with SIGINT ignored (a
    background job of a shell without job control, as a CI runner may start it) has none, and the interrupt would
    do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupt_once_closing(w: Writer) -> threading.Thread:
    def run():
        deadline = time.monotonic() + 10
        while not w.closed and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # (inside the wait)
        _thread.interrupt_main()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def close_interrupted(w: Writer) -> bool:
    try:
        return w.close(timeout=20)
    except KeyboardInterrupt:
        pytest.fail("the second Ctrl-C escaped the exit's wait for the prompt cache writes")


def test_a_second_interrupt_drops_the_queue_and_ends_without_finalizing_around_a_write(monkeypatch):
    exits: list[int] = []
    monkeypatch.setattr(disk_writer, "exit_now", exits.append, raising=False)
    inside, release, written = threading.Event(), threading.Event(), []

    def write(item):  # (a write inside mlx: save_safetensors, the GIL released)
        inside.set()
        release.wait(10)
        written.append(item)

    w = Writer(lambda: True, write, "test-writer")
    w.start()
    for i in range(4):
        w.put(bytes([i]), i)
    assert inside.wait(10)
    interrupter = interrupt_once_closing(w)
    try:
        assert close_interrupted(w) is False
        assert exits == [130]  # ended at once: the write in progress is not finalized around
        assert w.waiting == 1  # the one in progress; the three queued are dropped
    finally:
        release.set()
        interrupter.join(10)
    assert w.flush(5) and written == [0]
    w.put(b"late", "late")  # exiting: nothing more is queued
    assert w.waiting == 0


def test_a_second_interrupt_with_no_write_in_progress_just_stops_the_wait(monkeypatch):
    exits: list[int] = []
    monkeypatch.setattr(disk_writer, "exit_now", exits.append, raising=False)
    release, written = threading.Event(), []

    def prepare() -> bool:  # the weights' digest, read for the first time
        release.wait(10)
        return True

    w = Writer(prepare, written.append, "test-writer")
    w.start()
    w.put(b"a", "a")
    interrupter = interrupt_once_closing(w)
    try:
        assert close_interrupted(w) is False and exits == []  # nothing inside mlx: the interpreter may finalize
        assert w.waiting == 0
    finally:
        release.set()
        interrupter.join(10)
    assert w.flush(5) and written == []
