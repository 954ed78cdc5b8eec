"""The prompt disk's writer: one thread, its queue of snapshots, and its end at exit.

Rules:
- The queue and the thread are this module's; what a write does (the file, the index, eviction) is the prompt
  disk's (``write``), and so is what the thread does first (``prepare``: the weights' digest and the directory's
  index, off the request path). Where ``prepare`` fails, nothing is kept waiting and nothing more is queued.
- ``put`` queues an item under its key; the items ``supersedes`` names (a snapshot that gives way to a longer one
  of the same conversation) leave the queue first, and so does one under the same key (the same prefix, a newer
  snapshot: one that cannot be trimmed back, which ``supersedes`` never names, kept its old place and went first
  when the queue was over its bound, the freshest dropped).
- Bounded: the items waiting hold at most ``max_bytes`` (each its size, given to ``put``), else the oldest waiting
  leave the queue unwritten. A snapshot keeps its KV alive after the prompt cache let it go: a writer behind (the
  weights of a large model hashed on first use, a slow disk) while distinct prompts kept coming (an evaluation
  run, sub-agents) held a copy of each until memory ran out.
- A write that fails (a read-only folder, a full disk) is warned of once, with its reason (a traceback only where
  debug logging is on): the next ones fail alike, at every generation, and a warning with a traceback each buried
  the log. Writing goes on being tried (the prompt cache serves from memory meanwhile); a write that succeeds, or
  fails for another reason, is said once again (``Failing``).
- At exit (``atexit``, while Python still runs) the queued writes are finished (``EXIT_WAIT_S`` at most), then the
  thread parks for good and nothing more is queued: a thread still inside mlx (``save_safetensors`` releases the
  GIL) once the interpreter is finalizing is ended by Python on the spot, and the process aborts ("terminate
  called without an active exception", exit 134): a server stopped while generations were storing their
  prefixes. (engine/model_thread.py keeps the same rule for the model thread.)
- A second Ctrl-C during that wait (the server's first stopped it; this one says "now") stops the wait: the queued
  writes are dropped, unwritten. Where a write is still inside mlx, the process ends at once (``exit_now``, exit
  130, as the server's own second Ctrl-C does): finalizing around it aborts, and raising out of the ``atexit``
  handler did just that. Its file is not torn: it is written under a temporary name, renamed only once whole (a
  later start removes the temporary file once it is ten minutes old).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from typing import Any, Callable

log = logging.getLogger("tinytitan.cache")

EXIT_WAIT_S = 30.0  # at exit, how long the queued writes are waited for


class Failing:
    """The writes' failures, each reason warned of once until a write succeeds (see the rules)."""

    def __init__(self, place: str):
        self.place = place
        self.reason: tuple | None = None  # the last failure's, where no write succeeded since

    @staticmethod
    def reason_of(exc: BaseException) -> tuple:
        """What a failure says, without what differs between writes (the temporary file's name, a byte count)."""
        errno = getattr(exc, "errno", None)
        return (type(exc).__name__, errno) if errno is not None else (type(exc).__name__, re.sub(r"\d+", "#", str(exc)))

    def failed(self, exc: BaseException) -> None:
        reason = self.reason_of(exc)
        if reason == self.reason:
            log.debug("prompt cache on disk: a prefix could not be written to %s either (%s: %s)", self.place,
                      type(exc).__name__, exc)
            return
        self.reason = reason
        log.warning("prompt cache on disk: a prefix could not be written to %s (%s: %s); serving from memory, and "
                    "not saying so again until writing succeeds or fails otherwise", self.place, type(exc).__name__,
                    exc, exc_info=log.isEnabledFor(logging.DEBUG))

    def succeeded(self) -> None:
        if self.reason is not None:
            self.reason = None
            log.info("prompt cache on disk: prefixes are written to %s again", self.place)


def exit_now(code: int) -> None:
    """The process ends here, the interpreter not finalized (a thread is inside mlx: see the rules)."""
    logging.shutdown()
    os._exit(code)


class Writer:
    def __init__(self, prepare: Callable[[], bool], write: Callable[[Any], None], name: str,
                 max_bytes: int | None = None, place: str = "the cache folder"):
        """``prepare()`` → whether writing can go on; ``write(item)`` writes one queued item (its failure is logged:
        ``Failing``, which names ``place``); ``max_bytes``: what the items waiting may hold (None: no bound)."""
        self._prepare, self._write, self._name, self.max_bytes = prepare, write, name, max_bytes
        self.failing = Failing(place)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: dict[bytes, Any] = {}
        self._sizes: dict[bytes, int] = {}  # each waiting item's bytes
        self.dropped = 0  # items that left the queue unwritten, over ``max_bytes``
        self._busy = False  # a write in progress
        self._preparing = False
        self.dead = False  # ``prepare`` failed: nothing is queued
        self.closed = False  # exiting: nothing more is queued, the thread parks once the queue is empty
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._preparing = True  # (``flush`` waits for ``prepare`` too)
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
                atexit.register(self.close)

    def refuses(self) -> bool:
        return self.dead or self.closed

    def put(self, key: bytes, item: Any, supersedes: Callable[[Any], bool] | None = None, nbytes: int = 0) -> None:
        with self._lock:
            if self.dead or self.closed:
                return
            if supersedes is not None:
                for k, waiting in list(self._pending.items()):
                    if supersedes(waiting):
                        del self._pending[k]
                        self._sizes.pop(k, None)
            self._pending.pop(key, None)  # (to the back: the newest waiting)
            self._pending[key] = item
            self._sizes[key] = nbytes
            while self.max_bytes is not None and len(self._pending) > 1 and sum(self._sizes.values()) > self.max_bytes:
                oldest = next(iter(self._pending))
                del self._pending[oldest]
                self._sizes.pop(oldest, None)
                self.dropped += 1
                if self.dropped == 1:
                    log.warning("prompt cache on disk: the writer is behind; the oldest prefix waiting is dropped, "
                                "unwritten (waiting prefixes hold at most %d MiB)", self.max_bytes >> 20)
            self._wake.notify()

    @property
    def waiting(self) -> int:
        """The writes not done yet (queued, and the one in progress)."""
        with self._lock:
            return len(self._pending) + (1 if self._busy else 0)

    def flush(self, timeout: float = 30.0, preparing: bool = True) -> bool:
        """Wait until every queued write is done (tests, exit) → whether they all are. ``preparing``: wait for
        ``prepare`` too, where nothing is queued."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending or self._busy or (self._preparing and preparing):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = EXIT_WAIT_S) -> bool:
        """At exit: the queued writes are finished (``timeout`` at most), then the thread parks; a second Ctrl-C
        meanwhile drops them (see the rules)."""
        try:
            return self._finish(timeout)
        except KeyboardInterrupt:
            return self._interrupted()

    def _interrupted(self) -> bool:
        with self._lock:
            self.closed = True
            dropped = len(self._pending)
            self._pending.clear()
            self._sizes.clear()
            busy = self._busy
        log.warning("exiting: interrupted; %d prompt cache write(s) dropped, unwritten", dropped + busy)
        if busy:  # (a write inside mlx, under its temporary name)
            exit_now(130)
        return False

    def _finish(self, timeout: float) -> bool:
        with self._lock:
            self.closed = True
            self._wake.notify_all()
            queued = len(self._pending)
        if queued:
            log.info("exiting: finishing %d prompt cache write(s)", queued)
        # (``prepare`` runs no mlx code: with nothing queued, exit need not wait for it — the weights' digest may read
        # a large model's every file)
        done = self.flush(timeout, preparing=queued > 0)
        if not done:
            log.warning("exiting: prompt cache writes still in progress after %.0f s", timeout)
        return done

    def _loop(self) -> None:
        ok = self._prepare()
        with self._lock:
            self._preparing = False
            if not ok:
                self.dead = True
                self._pending.clear()
                self._sizes.clear()
            self._wake.notify_all()
        if not ok:
            return
        while True:
            with self._lock:
                while not self._pending and not self.closed:
                    self._wake.wait()
                key = next(iter(self._pending), None)
                item = self._pending.pop(key) if key is not None else None
                self._sizes.pop(key, None)
                self._busy = item is not None
            if item is None:  # exiting, the queue empty: never back in mlx (nor the GIL) while the interpreter ends
                threading.Event().wait()  # nothing sets it: blocks, the GIL released, until the process ends
            try:
                self._write(item)
            except Exception as exc:
                self.failing.failed(exc)
            else:
                self.failing.succeeded()
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()
