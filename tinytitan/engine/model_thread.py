"""One long-lived thread for all model work: loading, decoding, unloading.

Rules:
- Jobs run one after another, in the order given, on the same thread for the life of the process.
- The thread never ends: at exit (``atexit``, while Python still runs) it parks, once the jobs queued before
  are done (waiting ``PARK_WAIT_S`` at most), in a wait with no timeout that nothing ends; a job offered after
  that is refused (``Parked``). A thread that ends frees mlx's per-thread state, whose
  compiled functions call back into Python; one that wakes (its idle timer, a job) once the interpreter is
  shutting down is ended by Python on the spot, freeing that state without it, and the process aborts
  ("terminate called without an active exception", exit 134).
- ``start_soon(fn, deliver)`` is ``trio.lowlevel.start_thread_soon``'s shape: ``deliver(outcome)`` is called on
  the model thread when ``fn`` ends. ``run_sync`` waits for a job from trio (uncancellably, like
  ``trio.to_thread.run_sync``: a model half loaded is not abandoned).
- Once the thread has been idle for ``IDLE_TRIM_S`` after a job, it asks whether the C heap is worth trimming
  (``heap.IdleTrim``: not after an ordinary request, whose pages the next one would fault in again); never
  between jobs that come back to back, where the next request would wait for the trim.

Why one thread: MLX keeps per-thread state, and each new thread that runs it leaves two threads of its own
behind; glibc gives each thread its own malloc arena, which keeps the memory a long prompt used. Trio's
thread cache retires idle threads and starts new ones, so model work there slowly gathers both. One thread
loses nothing: a batch of requests is decoded together in one job's forward passes (decode/decoder.py), not in
threads of its own.
"""

from __future__ import annotations

import atexit
import functools
import logging
import queue
import threading
from typing import Any, Callable

import outcome
import trio

from ..heap import IdleTrim

log = logging.getLogger("tinytitan.engine")

IDLE_TRIM_S = 0.5  # seconds the thread waits idle after a job before the heap is trimmed
PARK_WAIT_S = 30.0  # at exit, how long a job still running is waited for before the process goes on exiting
PARK_SAY_S = 1.0  # ... and after how long the log says what the exit waits for
_PARK = object()  # the last job: the thread waits for nothing from then on


class Parked(RuntimeError):
    """The model thread takes no more jobs: the process is exiting."""


class ModelThread:
    def __init__(self, name: str = "tinytitan-model", trim: Callable[[], object] | None = None):
        """``trim``: called once the thread is idle after a job (``heap.IdleTrim``: it trims where worth it)."""
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._trim = trim or IdleTrim()
        self._parked = threading.Event()
        self._closed = False  # parking asked for: no job is taken from then on

    @property
    def ident(self) -> int | None:
        return self._thread.ident if self._thread else None

    def start_soon(self, fn: Callable[[], Any], deliver: Callable[[outcome.Outcome], None]) -> None:
        with self._lock:  # (queued under the lock: never behind the last job, where nothing would run it)
            if self._closed:
                raise Parked("the model thread has stopped taking jobs: the process is exiting")
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
                atexit.register(self.park)
            self._jobs.put((fn, deliver))

    def park(self, timeout: float = PARK_WAIT_S) -> bool:
        """Once the jobs queued before this call have run, the thread waits for nothing for good (see the rules;
        called at exit). Waits at most ``timeout`` for that → whether it parked."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                return True
            if not self._closed:
                self._closed = True
                self._jobs.put(_PARK)
        if self._parked.wait(min(PARK_SAY_S, timeout)):
            return True
        log.warning("exiting: waiting up to %.0f s for the model's work in progress to end", timeout)
        return self._parked.wait(max(timeout - PARK_SAY_S, 0))

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        result: list[outcome.Outcome] = []

        def deliver(o: outcome.Outcome) -> None:
            result.append(o)
            token.run_sync_soon(done.set)

        self.start_soon(functools.partial(fn, *args), deliver)
        with trio.CancelScope(shield=True):
            await done.wait()
        return result[0].unwrap()

    def _loop(self) -> None:
        owed = False  # a job ran since the last trim
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_TRIM_S) if owed else self._jobs.get()
            except queue.Empty:  # idle a while after a job
                self._trim()
                owed = False
                continue
            if job is _PARK:
                self._parked.set()
                queue.SimpleQueue().get()  # nothing is ever put: blocks (the GIL released) until the process ends
            fn, deliver = job
            result = outcome.capture(fn)
            try:
                deliver(result)
            except Exception:  # e.g. the trio run it reports to has ended; the thread serves the next one
                log.debug("model thread: a result could not be delivered", exc_info=True)
            owed = True


_shared: ModelThread | None = None
_shared_lock = threading.Lock()


def shared_model_thread() -> ModelThread:
    """The process's model thread (a process that runs several engines, as the tests do, still runs model
    work on one thread)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ModelThread()
        return _shared
