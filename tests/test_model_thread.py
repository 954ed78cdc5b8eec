"""The model thread (engine/model_thread.py): jobs run in order on one thread, and the C allocator is asked to
give memory back once the thread is idle after a job — never between jobs that come back to back, where the next
request would wait for the trim."""

from __future__ import annotations

import threading
import time

from tinytitan.engine import model_thread
from tinytitan.engine.model_thread import ModelThread


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
