"""Admission: the queue's places. At most ``running`` generations decode at once, at most ``max_queue`` more
wait (FIFO); a request beyond those is refused at once (``queue_full``), before any work is done for it.

Rules:
- A place belongs to a request, not to a task (a semaphore, not a lock): it is taken at admission, waits for a
  decode slot, runs, and is given back once, by the session that holds it (session.py).
- The memory layer's further rounds of an admitted request (``continuing``) are never refused; they wait
  their turn like any other.
- A request's generations admitted as a unit (its choices: a ``Unit``) are all or none, decided before anything
  was sent: the first's admission is refused unless the queue holds them all, and takes every place of the unit
  at once (its own, and the others held for it: counted as waiting, so no other request takes them). Each
  further generation of the unit takes one held place (never refused); those never taken go back when the
  request ends (``release``), whatever ended it. One that comes after that waits as a ``continuing`` one.
- ``exclusive`` holds every slot, for work that must not run beside a generation.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

import trio

from ..errors import ApiError


@dataclass(frozen=True)
class Capacity:
    """The most generations a server ever holds at once, and what it counts: its decode slots and the places to
    wait beyond them (``--max-queue``). A refusal worded from it says the numbers that were checked."""

    decoding: int
    waiting: int

    @property
    def most(self) -> int:
        return self.decoding + self.waiting


class Admission:
    """Places: at most ``running`` generations decode at once; at most ``max_queue`` more wait (FIFO)."""

    def __init__(self, running: int, max_queue: int):
        self.size = running
        self.max_queue = max_queue
        self.slots = trio.Semaphore(running)  # a semaphore: a place belongs to a request, not to a task
        self.running = 0
        self.waiting = 0

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold every slot (nothing decodes meanwhile): for work that must not run beside a generation."""
        taken = 0
        try:
            for _ in range(self.size):
                await self.slots.acquire()
                taken += 1
            yield
        finally:
            for _ in range(taken):
                self.slots.release()

    @property
    def capacity(self) -> Capacity:
        return Capacity(self.size, self.max_queue)

    @staticmethod
    def refusable(continuing: bool = False, unit: "Unit | None" = None) -> bool:
        """Whether a generation may be refused at all: a request's first may; a further one of a request already
        admitted (``continuing``: the memory layer's rounds; a later one of an admitted ``unit``) never is, as
        overloaded here or as the server stopping (the engine asks this, and ends such a one in-band instead)."""
        return not continuing and not (unit is not None and unit.admitted)

    def admit(self, continuing: bool = False, unit: "Unit | None" = None) -> "Place":
        """``continuing``: the next generation of a request already admitted (the memory layer's rounds) is
        never refused; it waits its turn like any other. ``unit``: one of the request's generations admitted as
        a unit (its choices; see the rules): the first is refused unless all of them would fit now, and holds
        the others' places; a later one takes one of those."""
        if unit is not None and unit.admitted and unit.held:  # (a place already counted as waiting: it becomes
            unit.held -= 1  # this generation's)
            return Place(self, counted=True)
        together = unit.size if unit is not None else 1
        # those that would wait beyond the free slots, this request's all counted
        if self.refusable(continuing, unit) and self.waiting - self.slots.value + together - 1 >= self.max_queue:
            them = f" and this request's {together} choices do not all fit" if together > 1 else ""
            raise ApiError("overloaded", f"The server is busy: {self.waiting} generations are already waiting "
                           f"(--max-queue {self.max_queue}; each choice of a request counts){them}; retry shortly",
                           code="queue_full")
        place = Place(self)
        if unit is not None and not unit.admitted:
            unit.admitted, unit.held = True, together - 1
            self.waiting += unit.held
        return place

    def release(self, unit: "Unit") -> None:
        """The request ``unit`` belongs to has ended: the places it held and no generation took go back."""
        self.waiting -= unit.held
        unit.held = 0


class Unit:
    """A request's ``size`` generations admitted as a unit (its choices; see the rules): whether its first was
    admitted, and how many places it holds for the others still."""

    def __init__(self, size: int, response_id: str | None = None):
        self.size = size
        self.response_id = response_id  # the request's (what its choices handed on goes with it: Engine.end_unit)
        self.admitted = False
        self.held = 0


class Place:
    """A place in the queue, from admission until its session ends: waiting, then running, then given back."""

    def __init__(self, admission: Admission, counted: bool = False):
        self.admission = admission
        if not counted:  # (``counted``: a place its unit held, already waiting)
            admission.waiting += 1
        self.running = False
        self.given_back = False
        self.asked_at: float | None = None  # when the session first waited for a slot
        self.waited_s: float | None = None  # how long it waited (the admission wait of its timing)

    async def wait(self, timeout: float) -> bool:
        """Wait for a decode slot; False when ``timeout`` passed first (the place keeps waiting)."""
        if self.asked_at is None:
            self.asked_at = time.perf_counter()
        with trio.move_on_after(timeout):
            await self.admission.slots.acquire()
            self._runs()
        return self.running

    def take_now(self) -> bool:
        """A decode slot at once where one is free; False otherwise (the place keeps waiting). trio's semaphore
        is fair: a free slot means no earlier place waits for one."""
        if self.asked_at is None:
            self.asked_at = time.perf_counter()
        try:
            self.admission.slots.acquire_nowait()
        except trio.WouldBlock:
            return False
        self._runs()
        return True

    def _runs(self) -> None:
        self.admission.waiting -= 1
        self.admission.running += 1
        self.running = True
        self.waited_s = time.perf_counter() - self.asked_at

    def give_back(self) -> None:
        assert not self.given_back, "a place is given back once, by its session"
        self.given_back = True
        if self.running:
            self.admission.running -= 1
            self.admission.slots.release()
        else:
            self.admission.waiting -= 1
