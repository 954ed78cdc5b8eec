"""Admission: the queue's places. At most ``running`` generations decode at once, at most ``max_queue`` more
wait (FIFO); a request beyond those is refused at once (``queue_full``), before any work is done for it.

Rules:
- A place belongs to a request, not to a task (a semaphore, not a lock): it is taken at admission, waits for a
  decode slot, runs, and is given back once, by the session that holds it (session.py).
- The memory layer's further rounds of an admitted request (``continuing``) are never refused; they wait
  their turn like any other. So are a request's further choices, once its first was admitted for them all
  (``together``): all or none, decided before anything was sent.
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

    def admit(self, continuing: bool = False, together: int = 1) -> "Place":
        """``continuing``: the next generation of a request already admitted (the memory layer's rounds) is
        never refused; it waits its turn like any other. ``together``: the request's generations admitted as a
        unit (its choices): refused unless all of them would fit now; this place is the first, the others come
        as ``continuing`` ones."""
        # those that would wait beyond the free slots, this request's all counted
        if not continuing and self.waiting - self.slots.value + together - 1 >= self.max_queue:
            unit = f" and this request's {together} choices do not all fit" if together > 1 else ""
            raise ApiError("overloaded", f"The server is busy: {self.waiting} requests are already waiting "
                           f"(--max-queue {self.max_queue}){unit}; retry shortly", code="queue_full")
        return Place(self)


class Place:
    """A place in the queue, from admission until its session ends: waiting, then running, then given back."""

    def __init__(self, admission: Admission):
        self.admission = admission
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
