"""Giving memory back after a large request.

A 30 MB prompt leaves its JSON, its strings and the engine's copies in the malloc heap when it is refused; glibc
keeps those pages. After a request with a large body the server asks glibc to return free pages to the system
(``malloc_trim(0)``), on a worker thread, at most once per ``interval`` seconds: requests that come closer
together share one trim, run when the interval is up. Where there is no glibc (macOS, musl), nothing is done.
"""

from __future__ import annotations

import logging
from typing import Callable

import trio

from ..heap import glibc_trim

log = logging.getLogger("tinytitan.http")


class Trimmer:
    """One trim at a time, at most one per ``interval``; ``delay``: the wait after the request, for its
    objects to be let go before the heap is trimmed."""

    def __init__(self, trim: Callable[[], object] | None = None, interval: float = 10.0, delay: float = 0.2):
        self.trim = glibc_trim() if trim is None else trim
        self.interval = interval
        self.delay = delay
        self.last = -float("inf")
        self.pending = False
        self.count = 0

    def after_large(self, nursery: trio.Nursery | None) -> None:
        """A request with a large body ended: trim soon (in ``nursery``), unless a trim is already due."""
        if self.trim is None or nursery is None or self.pending:
            return
        self.pending = True
        nursery.start_soon(self._run)

    async def _run(self) -> None:
        try:
            await trio.sleep_until(max(trio.current_time() + self.delay, self.last + self.interval))
            result = await trio.to_thread.run_sync(self.trim)
            self.count += 1
            log.debug("heap trimmed after a large request (malloc_trim: %s)", result)
        except Exception:  # giving memory back is a courtesy: never a failure of the server
            log.exception("malloc_trim failed")
        finally:
            self.last = trio.current_time()
            self.pending = False
