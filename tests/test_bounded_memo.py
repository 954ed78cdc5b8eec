"""The bounded memo behind the package's small caches (tinytitan/memo.py): at most ``size`` answers,
the least recently used forgotten first; an answer that raised is not remembered, None is; many threads at once
keep the bound and each key's answer, and one answer being worked out holds no other caller up."""

from __future__ import annotations

import sys
import threading

import pytest

from tinytitan.memo import BoundedMemo


class Work:
    """An answer worked out, each call counted."""

    def __init__(self, answer=None):
        self.answer, self.calls = answer, 0

    def __call__(self):
        self.calls += 1
        return self.answer


def test_an_answer_is_worked_out_once_and_the_bound_forgets_the_oldest():
    memo, works = BoundedMemo(2), {k: Work(k.upper()) for k in "abc"}
    assert [memo.recall(k, works[k]) for k in "abc"] == ["A", "B", "C"]
    assert len(memo) == 2 and "a" not in memo and {"b", "c"} <= {k for k in "abc" if k in memo}
    assert memo.recall("b", works["b"]) == "B" and works["b"].calls == 1  # remembered
    assert memo.recall("a", works["a"]) == "A" and works["a"].calls == 2  # forgotten: worked out again


def test_a_recalled_answer_is_the_most_recently_used():
    memo = BoundedMemo(2)
    memo.recall("a", Work(1))
    memo.recall("b", Work(2))
    memo.recall("a", Work("unused"))  # a is used again: b is now the oldest
    memo.recall("c", Work(3))
    assert "a" in memo and "b" not in memo and "c" in memo


def test_get_and_put_use_a_key_as_recall_does():
    """A record kept by id (a WebSocket connection's responses, the prompts kept for a comparison): what ``get``
    reads and ``put`` writes is the most recently used; ``in`` reads without using."""
    memo = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("b", None)
    assert memo.get("a") == 1  # a is read: b is now the oldest
    assert "b" in memo and memo.get("b", "absent") is None  # (None is an answer) b is read: a is the oldest
    assert "a" in memo  # (reads nothing as used)
    memo.put("c", 3)
    assert "a" not in memo and memo.get("a", "absent") == "absent" and memo.get("c") == 3
    memo.put("b", 2)  # written again: the newest, its answer replaced
    memo.put("d", 4)
    assert "c" not in memo and memo.get("b") == 2 and len(memo) == 2


def test_none_is_remembered_and_what_raises_is_not():
    memo, nothing = BoundedMemo(4), Work(None)
    assert memo.recall("k", nothing) is None and memo.recall("k", nothing) is None and nothing.calls == 1
    tries = []

    def refused():
        tries.append(1)
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo.recall("bad", refused)
    assert len(tries) == 2 and "bad" not in memo


def test_a_memo_holds_at_least_one_answer():
    with pytest.raises(ValueError):
        BoundedMemo(0)


def test_answers_are_worked_out_outside_the_lock():
    memo = BoundedMemo(8)
    both = threading.Barrier(2, timeout=10)  # two new keys worked out at once: neither waits for the other
    out = {}

    def met(key):
        both.wait()  # (broken after 10 s alone: the other caller was held up)
        return key

    def ask(key):
        out[key] = memo.recall(key, lambda: met(key))

    threads = [threading.Thread(target=ask, args=(k,)) for k in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert out == {"x": "x", "y": "y"}


def test_many_threads_keep_the_bound_and_each_keys_answer():
    memo, wrong, errors = BoundedMemo(8), [], []

    def hammer(seed):
        try:
            for i in range(2000):
                key = (seed * 7 + i * 3) % 20
                if memo.recall(key, lambda: key * key) != key * key:
                    wrong.append(key)
                if len(memo) > 8:
                    wrong.append("over the bound")
        except Exception as exc:  # (a table changed between a read and a move raises here)
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: a race shows
    try:
        threads = [threading.Thread(target=hammer, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and wrong == [] and len(memo) == 8
