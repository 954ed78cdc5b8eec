"""A bounded memo: an answer worked out once per key, the least recently used forgotten past a bound.

Rules:
- Thread-safe: a memo is reached from the decode thread and from request handlers at once. Its lock is held
  only to read or write the table, never while an answer is worked out (a grammar's compile can take a
  second): two callers asking for the same new key at once may both work it out, and either answer is kept.
- What raises while an answer is worked out is not remembered: the next caller works it out again. Any value
  that comes back is remembered, None included.
- A key read or written is the most recently used; past ``size`` keys, the least recently used goes.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """Answers by key, at most ``size`` of them (see the rules)."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a bounded memo holds at least one answer, not {size}")
        self.size = size
        self._lock = threading.Lock()
        self._answers: collections.OrderedDict[K, V] = collections.OrderedDict()  # least recently used first

    def recall(self, key: K, work: Callable[[], V]) -> V:
        """The answer for ``key``: the one remembered, else ``work()``'s (remembered unless it raises)."""
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        answer = work()
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)
        return answer

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._answers
