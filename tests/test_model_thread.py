"""The model thread (engine/model_thread.py): jobs run in order on one thread, and the C allocator is asked to
give memory back once the thread is idle after a job that left much of the heap free — never between jobs that
come back to back, where the next request would wait for the trim, and not after a job that left little free,
whose pages the next request would fault in again."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from tinytitan.engine import model_thread
from tinytitan.engine.model_thread import ModelThread
from tinytitan.heap import glibc_free_bytes


def test_the_heap_is_trimmed_once_the_thread_is_idle_not_between_jobs(monkeypatch):
    monkeypatch.setattr(model_thread, "IDLE_TRIM_S", 0.2)
    trims: list[float] = []
    thread = ModelThread("tinytitan-test-model", trim=lambda: trims.append(time.monotonic()),
                         free_bytes=lambda: model_thread.TRIM_FREE_BYTES)
    queued = threading.Event()
    ran: list[tuple[int, int, int]] = []  # (job, its thread, trims seen when it ran)
    delivered = threading.Event()

    def job(i):
        def run():
            if i == 0:
                queued.wait(10)  # the other jobs are queued behind it before it ends
            ran.append((i, threading.get_ident(), len(trims)))
        return run

    for i in range(3):
        thread.start_soon(job(i), (lambda o: delivered.set()) if i == 2 else (lambda o: None))
    queued.set()
    assert delivered.wait(10)
    assert [i for i, _, _ in ran] == [0, 1, 2] and len({t for _, t, _ in ran}) == 1
    assert all(seen == 0 for _, _, seen in ran)  # no trim between back-to-back jobs
    deadline = time.monotonic() + 10
    while not trims and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(trims) == 1  # idle after the last job: one trim
    time.sleep(0.5)
    assert len(trims) == 1  # and no more while nothing runs
    thread.start_soon(lambda: None, lambda o: None)
    deadline = time.monotonic() + 10
    while len(trims) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(trims) == 2  # a later job owes one again


def _idle_after(thread: ModelThread) -> None:
    done = threading.Event()
    thread.start_soon(lambda: None, lambda o: done.set())
    assert done.wait(10)
    time.sleep(0.4)  # idle past IDLE_TRIM_S


def test_the_heap_is_trimmed_only_when_it_holds_much_free(monkeypatch):
    monkeypatch.setattr(model_thread, "IDLE_TRIM_S", 0.1)
    free = [model_thread.TRIM_FREE_BYTES - 1]
    trims: list[int] = []
    thread = ModelThread("tinytitan-test-model", trim=lambda: trims.append(free[0]), free_bytes=lambda: free[0])
    _idle_after(thread)
    assert trims == []  # an ordinary request's leftovers stay for the next one
    free[0] = 3 * model_thread.TRIM_FREE_BYTES  # what a long prompt leaves
    _idle_after(thread)
    assert trims == [3 * model_thread.TRIM_FREE_BYTES]


@pytest.mark.skipif(glibc_free_bytes() is None, reason="no mallinfo2 in this C library")
def test_glibc_free_bytes_reads_the_heap():
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    free_bytes = glibc_free_bytes()
    assert sys.platform.startswith("linux")
    before = free_bytes()
    blocks = [libc.malloc(64 << 10) for _ in range(1600)]  # under the mmap threshold: in the heap
    try:
        for block in blocks[::2]:  # every other one: holes the heap keeps (they cannot merge into its top)
            libc.free(block)
        assert free_bytes() >= before + 800 * (64 << 10) * 0.9
    finally:
        for block in blocks[1::2]:
            libc.free(block)
