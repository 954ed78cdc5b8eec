"""Cached prefixes found by the ids they share with a prompt, without comparing the prompt with each of them.

Rules:
- Members are kept in the order of their ids' bytes (int64, little-endian: two id sequences share exactly k ids
  when their bytes share 8k to 8k + 7 bytes). In that order, the members a prompt shares its longest prefix
  with lie on either side of where the prompt would go, and the members sharing at least a given prefix with
  it lie together around that place: a lookup is a bisection (a few comparisons, each a ``memcmp``) whatever
  the number of members, where comparing the prompt with every member cost a few microseconds a member — on
  every request, for a disk cache holding thousands of prefixes.
- What the prompt cache asks is one of five questions: the longest prefix a prompt shares with any member, and
  with which (``longest``); every member by the prefix it shares, longest first (``nearest``: walked outward from
  where the prompt would go, as far as the caller reads); the members holding exactly some ids (``exact``); the
  members whose ids are a prefix of a prompt, longest first (``prefixes_of``); the members whose ids begin with
  some ids (``starting_with``). Where several members answer alike, the caller picks among them.
- Members with the same ids are kept together, in the order they were added. A member is removed by identity.
- It holds no lock and does no I/O: its owner changes it under the lock that guards the members themselves.
- ``Reusable`` is the pair the prompt cache keeps (in memory, and per cache layout on disk): members whose KV
  cache can be trimmed back to a shorter prefix (or that hold none), and members reused only whole; ``best`` is
  what a prompt can take of them, of those its caller can hold (``fits``: the disk's files that memory can keep,
  where the longest cannot be).
"""

from __future__ import annotations

import bisect
from typing import Callable, Generic, Iterator, Sequence, TypeVar

import numpy as np

M = TypeVar("M")


def key_of(tokens: Sequence[int] | np.ndarray) -> bytes:
    """The bytes members are ordered by: the ids as little-endian int64."""
    return np.ascontiguousarray(tokens, dtype="<i8").tobytes()


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many ids two id arrays share at their start."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    ne = a[:n] != b[:n]
    first = int(ne.argmax())
    return first if ne[first] else n


def shared(a: bytes, b: bytes) -> int:
    """How many ids two keys share at their start."""
    return common_prefix(np.frombuffer(a, dtype="<i8"), np.frombuffer(b, dtype="<i8"))


class PrefixIndex(Generic[M]):
    def __init__(self) -> None:
        self._keys: list[bytes] = []  # sorted, each once
        self._at: dict[bytes, list[M]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._at.values())

    def add(self, tokens, member: M) -> None:
        key = key_of(tokens)
        held = self._at.get(key)
        if held is None:
            bisect.insort(self._keys, key)
            self._at[key] = [member]
        else:
            held.append(member)

    def discard(self, tokens, member: M) -> None:
        """Remove ``member`` (the very object) held under ``tokens``; nothing when it is not there."""
        key = key_of(tokens)
        held = self._at.get(key)
        if held is None:
            return
        kept = [m for m in held if m is not member]
        if kept:
            self._at[key] = kept
            return
        del self._at[key]
        i = bisect.bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i] == key:
            del self._keys[i]

    def clear(self) -> None:
        self._keys.clear()
        self._at.clear()

    def longest(self, tokens) -> tuple[int, list[M]]:
        """The most ids ``tokens`` shares at its start with any member, and those of its two neighbours in the
        order that share that many (at least one, where there is any member; others may share as many)."""
        q = key_of(tokens)
        i = bisect.bisect_left(self._keys, q)
        near = self._keys[max(i - 1, 0):i + 1]
        if not near:
            return 0, []
        counts = [shared(k, q) for k in near]
        best = max(counts)
        return best, [m for k, c in zip(near, counts) if c == best for m in self._at[k]]

    def nearest(self, tokens) -> Iterator[tuple[int, list[M]]]:
        """(ids shared with ``tokens``, members) for every member, the most shared first: on either side of where
        ``tokens`` would go, what keys share with it only falls as they lie further away."""
        q = key_of(tokens)
        right = bisect.bisect_left(self._keys, q)
        left = right - 1
        while left >= 0 or right < len(self._keys):
            a = shared(self._keys[left], q) if left >= 0 else -1
            b = shared(self._keys[right], q) if right < len(self._keys) else -1
            if a >= b:
                yield a, list(self._at[self._keys[left]])
                left -= 1
            else:
                yield b, list(self._at[self._keys[right]])
                right += 1

    def exact(self, tokens) -> list[M]:
        return list(self._at.get(key_of(tokens), ()))

    def prefixes_of(self, tokens) -> Iterator[tuple[int, list[M]]]:
        """(ids, members) for each member whose ids are a prefix of ``tokens`` (``tokens`` itself included),
        longest first. Each step bisects for the greatest key not after what is left of the prompt: a prefix of it
        (found), or a key that parts from it, and no member longer than the ids they share is a prefix of it."""
        q = key_of(tokens)
        end = len(q)
        while end > 0:
            part = q[:end]
            i = bisect.bisect_right(self._keys, part) - 1
            if i < 0:
                return
            k = self._keys[i]
            if part.startswith(k):
                yield len(k) // 8, list(self._at[k])
                end = len(k) - 8
            else:
                end = shared(k, part) * 8

    def starting_with(self, tokens) -> Iterator[tuple[int, list[M]]]:
        """(ids, members) for each member whose ids begin with ``tokens`` (``tokens`` itself included), in order."""
        q = key_of(tokens)
        i = bisect.bisect_left(self._keys, q)
        while i < len(self._keys) and self._keys[i].startswith(q):
            k = self._keys[i]
            yield len(k) // 8, list(self._at[k])
            i += 1


class Reusable(Generic[M]):
    """Cached prefixes in two indexes: those whose cache can be trimmed back to a shorter prefix (or that hold no
    KV), and those reused only whole (see the rules)."""

    def __init__(self) -> None:
        self._by = {True: PrefixIndex(), False: PrefixIndex()}  # trimmable -> its index

    def add(self, tokens, member: M, trimmable: bool) -> None:
        self._by[trimmable].add(tokens, member)

    def discard(self, tokens, member: M, trimmable: bool) -> None:
        self._by[trimmable].discard(tokens, member)

    def clear(self) -> None:
        for index in self._by.values():
            index.clear()

    def best(self, prompt, fits: Callable[[M], bool] | None = None) -> tuple[M | None, int]:
        """The member that gives the most of ``prompt``'s ids, at least one left to read, and how many: the
        prefix it shares with the prompt, where it can be trimmed back to that or is wholly that prefix (one
        holding just that, nothing to copy or trim, before one to trim); of those ``fits`` takes, where given.
        (None, 0) when none gives any."""
        cap = len(prompt) - 1
        if cap <= 0:
            return None, 0
        if fits is None:
            n, near = self._by[True].longest(prompt)
        else:  # the most shared by one that fits (those sharing more are passed over)
            n, near = next(((k, ok) for k, ms in self._by[True].nearest(prompt) if (ok := [m for m in ms if fits(m)])),
                           (0, []))
        n = min(n, cap)
        whole = next(((k, ok) for k, ms in self._by[False].prefixes_of(prompt[:cap])  # the longest reused only whole
                      if (ok := [m for m in ms if fits is None or fits(m)])), None)
        if whole is not None and whole[0] >= n:
            return whole[1][0], whole[0]
        if n <= 0:
            return None, 0
        exact = [m for m in self._by[True].exact(prompt[:n]) if fits is None or fits(m)]
        return (exact or near)[0], n

    def longest(self, tokens) -> tuple[int, list[M]]:
        """``PrefixIndex.longest`` over both."""
        found = [index.longest(tokens) for index in self._by.values()]
        n = max(k for k, _ in found)
        return n, [m for k, ms in found if k == n for m in ms]

    def exact(self, tokens) -> list[M]:
        return [m for index in self._by.values() for m in index.exact(tokens)]

    def prefixes_of(self, tokens) -> list[M]:
        return [m for index in self._by.values() for _, ms in index.prefixes_of(tokens) for m in ms]

    def starting_with(self, tokens) -> list[M]:
        return [m for index in self._by.values() for _, ms in index.starting_with(tokens) for m in ms]
