"""The decode loop on the model thread: rows arrive from any thread, step together (``Scheduler.step``: plan →
forward → fold, scheduler.py), and leave.

Rules:
- One loop, a job on the model thread, runs while any row is in flight. Each turn it takes the rows that
  arrived, admits those that may start (rows of the model being decoded; one of another model waits until
  every row has left, then the loop switches models), and runs one step (``Scheduler.step``): ``plan`` (a
  ``step.Plan``: plain data), ``Forward.run`` (step.py), ``fold``.
- A break of the loop itself retires every row it holds or waits for, the way the fold retires a row that
  ended (``Scheduler.retire``): none is left waiting.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from .plan import PREFILL_STEP
from .rows import Row
from .scheduler import FIRST_CHUNK, Scheduler

if TYPE_CHECKING:
    from ..model_thread import ModelThread

log = logging.getLogger("tinytitan.batch")


class Decoder:
    """The decode loop's trio-facing half: ``submit`` a row from any thread; the loop starts on the model
    thread when the first row arrives and ends when the last one leaves."""

    def __init__(self, model_thread: "ModelThread", make_resident: Callable[[Any], float | None], max_batch: int,
                 make_scheduler: Callable[..., Scheduler] = Scheduler):
        """``make_scheduler``: the scheduler each run of the loop uses (lockstep.py's on rank 0 of a group)."""
        self.model_thread = model_thread
        self.make_scheduler = make_scheduler
        self.make_resident = make_resident
        self.max_batch = max_batch
        self._inbox: collections.deque[Row] = collections.deque()
        self._later: collections.deque[Row] = collections.deque()  # taken in, waiting for the batch to drain
        self._lock = threading.Lock()
        self._running = False
        self.size = 0  # rows in flight now (decoding, or their prompt being read): the batch size shown

    def submit(self, row: Row) -> None:
        with self._lock:
            self._inbox.append(row)
            start, self._running = not self._running, True
        if start:
            self.model_thread.start_soon(self._run, lambda _outcome: None)

    def arrived(self) -> list[Row]:
        """The rows that arrived and are not taken in yet — those of another model waiting for the batch to
        drain too (a copy: a group's watchdog tells their consumers)."""
        with self._lock:
            return list(self._later) + list(self._inbox)

    @property
    def waiting(self) -> int:
        """Rows that arrived and are not taken in yet."""
        return len(self._inbox)

    # -- the loop (model thread) -------------------------------------------------------------------------------
    def _run(self) -> None:
        batching = self.max_batch > 1
        scheduler = self.make_scheduler(self.make_resident, self.max_batch,
                                        FIRST_CHUNK if batching else PREFILL_STEP, batching)
        later = self._later  # rows taken in, of another model than the batch's (changed under the lock)
        row = None  # the one being taken in: in no list while it opens
        try:
            while True:
                with self._lock:
                    later.extend(self._inbox)
                    self._inbox.clear()
                    if not later and not scheduler.rows:
                        self._running = False
                        self.size = 0
                        return
                while True:  # a row whose consumer left while it waited holds no place in line (nor the batch)
                    with self._lock:
                        row = next((r for r in later if r.stopped), None)
                        if row is None:
                            break
                        later.remove(row)
                    scheduler.let_go(row)
                    row = None
                while later and (not scheduler.rows or later[0].backend is scheduler.backend):
                    with self._lock:
                        row = later.popleft()
                    if row.stopped:
                        scheduler.let_go(row)
                    else:
                        scheduler.admit(row)
                    row = None
                self.size = len(scheduler.rows)
                if scheduler.rows:
                    scheduler.step(lambda: self._next_joins(scheduler, later))
        except BaseException as exc:  # the loop itself broke: no row may be left waiting
            log.exception("decode loop failed")
            with self._lock:
                waiting = list(later) + list(self._inbox)
                if row is not None and row.ending is None and row.id not in scheduler.rows:
                    waiting.append(row)  # it broke the loop while it was taken in
                later.clear()
                self._inbox.clear()
                self._running = False
                self.size = 0
            error = exc if isinstance(exc, Exception) else RuntimeError(f"the decode loop stopped: {exc!r}")
            for row in list(scheduler.rows.values()) + waiting:
                try:
                    row.fail(error)  # (never an exit of the process for each row's consumer to raise)
                    scheduler.retire(row)
                except BaseException:  # the others are still ended
                    log.exception("a row could not be ended")
        finally:
            scheduler.close()

    def _next_joins(self, scheduler: Scheduler, later: collections.deque[Row]) -> bool:
        """Whether the row next in line (those taken in first, then the inbox) would join the batch now: one of
        the model being decoded. One of another model waits until the batch has drained, and all behind it."""
        with self._lock:
            nxt = later[0] if later else self._inbox[0] if self._inbox else None
        return nxt is not None and nxt.backend is scheduler.backend
