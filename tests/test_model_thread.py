"""The model thread (engine/model_thread.py): jobs run in order on one thread, and once it is idle after a job
it asks whether the C heap is worth trimming — never between jobs that come back to back, where the next
request would wait for the trim. Whether (heap.py ``IdleTrim``): where much is free and was faulted in since
the last trim, not after an ordinary request, whose pages the next request would fault in again."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from tinytitan.engine import model_thread
from tinytitan.engine.model_thread import ModelThread
from tinytitan.heap import TRIM_ABOVE, IdleTrim, glibc_free_bytes, glibc_trim, resident_bytes


def test_the_heap_is_trimmed_once_the_thread_is_idle_not_between_jobs(monkeypatch):
    monkeypatch.setattr(model_thread, "IDLE_TRIM_S", 0.2)
    trims: list[float] = []
    thread = ModelThread("tinytitan-test-model", trim=lambda: trims.append(time.monotonic()))
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


def test_idle_trim_trims_only_what_a_long_prompt_left():
    heap = {"free": 10 << 20, "resident": 500 << 20}
    trims = []

    def trim():
        trims.append(dict(heap))
        heap["resident"] -= heap["free"]  # the free pages go back; the holes stay free in the allocator

    idle = IdleTrim(trim, lambda: heap["free"], lambda: heap["resident"])
    assert not idle() and trims == []  # an ordinary request's leftovers stay for the next one
    heap.update(free=200 << 20, resident=700 << 20)  # a long prompt
    assert idle() and len(trims) == 1
    assert not idle() and len(trims) == 1  # the holes still read free, but nothing was faulted in again
    heap["resident"] += 20 << 20  # an ordinary request reuses some of them
    assert not idle() and len(trims) == 1
    heap["resident"] += TRIM_ABOVE  # another long prompt faults them all in
    assert idle() and len(trims) == 2


def test_idle_trim_trims_every_time_where_the_heap_cannot_be_read():
    trims = []
    idle = IdleTrim(lambda: trims.append(1), None, None)
    idle.free_bytes = idle.resident = None  # as on a C library without mallinfo2, or no /proc
    assert idle() and idle() and len(trims) == 2


@pytest.mark.skipif(glibc_free_bytes() is None, reason="no mallinfo2 in this C library")
def test_glibc_free_bytes_reads_the_heap_and_a_trim_gives_its_holes_back():
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    free_bytes, resident = glibc_free_bytes(), resident_bytes()
    assert sys.platform.startswith("linux") and resident is not None
    size = 64 << 10  # under the mmap threshold: in the heap
    blocks = [libc.malloc(size) for _ in range(1600)]
    try:
        for block in blocks:
            ctypes.memset(block, 1, size)  # resident
        before, touched = free_bytes(), resident()
        for block in blocks[::2]:  # every other one: holes the heap keeps (they cannot merge into its top)
            libc.free(block)
        assert free_bytes() >= before + 800 * size * 0.9
        glibc_trim()()
        assert resident() <= touched - 800 * size * 0.5
    finally:
        for block in blocks[1::2]:
            libc.free(block)


EXIT_WHILE_THE_IDLE_TIMER_RUNS = """
import time
import mlx.core as mx
from tinytitan.engine import model_thread

model_thread.IDLE_TRIM_S = 0.05
double = mx.compile(lambda x: x * 2)  # a compiled function: the thread's mlx state then holds Python objects
thread = model_thread.ModelThread("tinytitan-test-model", trim=lambda: None)
done = []
thread.start_soon(lambda: mx.eval(double(mx.array([1.0]))), done.append)
while not done:
    time.sleep(0.001)


class SlowToCollect:  # freed as the interpreter clears its modules: keeps its shutdown going past the timer
    def __del__(self, sleep=time.sleep, write=__import__("os").write):
        write(2, b"shutting down\\n")
        sleep(0.3)


module = type(time)("slow_to_collect")
module.last = SlowToCollect()
__import__("sys").modules["slow_to_collect"] = module
"""


def test_a_process_ends_cleanly_while_the_model_thread_waits_for_its_idle_timer(tmp_path):
    """At exit the model thread parks for good: one left to wake (its idle timer) while the interpreter shuts
    down is ended by Python there and frees mlx's per-thread state without it — the process aborted (exit 134,
    "terminate called without an active exception") after any short run that had just decoded."""
    import subprocess

    script = tmp_path / "exits.py"
    script.write_text(EXIT_WHILE_THE_IDLE_TIMER_RUNS)
    for _ in range(3):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "shutting down" in done.stderr and "terminate called" not in done.stderr


def test_a_parked_thread_takes_no_more_jobs():
    thread = ModelThread("tinytitan-test-model", trim=lambda: None)
    ran = threading.Event()
    thread.start_soon(lambda: None, lambda o: ran.set())
    assert ran.wait(10) and thread.park(timeout=10)
    with pytest.raises(RuntimeError, match="stopped taking jobs"):
        thread.start_soon(lambda: None, lambda o: None)


def test_parking_waits_for_the_jobs_queued_before_it_and_says_so_when_they_take_long(monkeypatch, caplog):
    monkeypatch.setattr(model_thread, "PARK_SAY_S", 0.05)
    thread = ModelThread("tinytitan-test-model", trim=lambda: None)
    ran = []
    thread.start_soon(lambda: time.sleep(0.3), lambda o: ran.append("first"))
    thread.start_soon(lambda: None, lambda o: ran.append("second"))
    with caplog.at_level("WARNING", logger="tinytitan.engine"):
        assert thread.park(timeout=10)
    assert ran == ["first", "second"] and "waiting up to 10 s" in caplog.text
