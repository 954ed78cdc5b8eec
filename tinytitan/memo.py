"""A bounded memo: an answer worked out once per key, the least recently used forgotten past a bound. The one
least-recently-used table of the package (structured output's grammars, the prompts kept for comparison, a mask's
mlx rows, a WebSocket connection's responses, compaction payloads decoded, items found valid): in no layer, so
the engine, the protocols and the spec language may each use it.

Rules:
- Thread-safe: a memo is reached from the decode thread and from request handlers at once. Its lock is held
  only to read or write the table, never while an answer is worked out (a grammar's compile can take a
  second): two callers asking for the same new key at once may both work it out, and either answer is kept.
- What raises while an answer is worked out is not remembered: the next caller works it out again. Any value
  that comes back is remembered, None included.
- A key read or written is the most recently used; past ``size`` keys, the least recently used goes. ``get`` and
  ``put`` read and write it for a caller that has its answer already (a record kept by id); ``in`` and ``len``
  read without using.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_NONE = object()  # (no answer remembered: None is an answer)


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
        answer = self.get(key, _NONE)
        if answer is _NONE:
            answer = work()
            self.put(key, answer)
        return answer

    def get(self, key: K, default=None):
        """The answer remembered for ``key`` (now the most recently used), else ``default``."""
        with self._lock:
            if key not in self._answers:
                return default
            self._answers.move_to_end(key)
            return self._answers[key]

    def put(self, key: K, answer: V) -> None:
        """``answer`` remembered for ``key``, the most recently used (the least recently used goes past ``size``)."""
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._answers
