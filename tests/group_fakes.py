"""Stand-ins for a group of ranks, in one process: StoppingGroup, rank 0 of two whose rank 1 stops answering when
told (a broadcast then waits until it is back)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from tinytitan.engine.group.ranks import Group, GroupBroken


class StoppingGroup(Group):
    """Rank 0 of two; once ``stopped`` is set, a broadcast waits (rank 1 stopped answering: ``stuck``) until
    ``back``."""

    def __init__(self):
        super().__init__(SimpleNamespace(rank=lambda: 0, size=lambda: 2), "ring")
        self.stopped = threading.Event()
        self.stuck = threading.Event()
        self.back = threading.Event()

    def share(self, obj=None, counted=True, report=False):
        if self.broken:
            raise GroupBroken(self.broken)
        if self.stopped.is_set():
            self.stuck.set()
            self.back.wait()
        return obj
