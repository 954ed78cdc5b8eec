"""The prefix index (engine/cache/prefix_index.py) answers what comparing a prompt with every member answered, and
the prompt cache and its disk, which now ask it, reuse what they reused before."""

import random
from pathlib import Path

import numpy as np
import pytest

from tinytitan.engine.cache.disk import PromptDisk
from tinytitan.engine.cache.entries import kv_trimmable
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.cache.prefix_index import PrefixIndex


def lcp(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def sequences(rng: random.Random):
    """Id runs that share prefixes of every length with each other (and ids of every sign and size: an image's
    key is negative, a little-endian byte order puts 256 before 1)."""
    base = [rng.randrange(-3, 300) for _ in range(20)]

    def one():
        k = rng.randrange(0, 21)
        tail = [rng.choice([rng.randrange(-3, 4), 256, 1, rng.randrange(-(2 ** 40), 2 ** 40)])
                for _ in range(rng.randrange(0 if k else 1, 6))]
        return base[:k] + tail

    return one


@pytest.mark.parametrize("seed", range(40))
def test_the_index_answers_as_comparing_every_member(seed):
    rng = random.Random(seed)
    one = sequences(rng)
    index, held = PrefixIndex(), []
    for _ in range(80):
        if held and rng.random() < 0.3:
            t, m = held.pop(rng.randrange(len(held)))
            index.discard(np.array(t), m)
        else:
            t, m = one(), object()
            held.append((t, m))
            index.add(np.array(t, dtype=np.int64), m)
        q = one()
        n, near = index.longest(q)
        assert n == max((lcp(t, q) for t, _ in held), default=0)
        assert bool(near) == bool(held)
        assert all(lcp(t, q) == n for t, m in held if any(m is x for x in near))
        assert {id(m) for m in index.exact(q)} == {id(m) for t, m in held if t == q}
        prefixes = list(index.prefixes_of(q))
        assert [k for k, _ in prefixes] == sorted({len(t) for t, _ in held if t == q[:len(t)]}, reverse=True)
        for k, ms in prefixes:
            assert {id(m) for m in ms} == {id(m) for t, m in held if t == q[:k]}
        starting = [k for k, _ in index.starting_with(q)]
        assert sorted(starting) == sorted(len(t) for t in {tuple(t) for t, _ in held if t[:len(q)] == q})
        nearest = list(index.nearest(q))  # every member once, the most shared first
        assert [k for k, _ in nearest] == sorted((k for k, _ in nearest), reverse=True)
        assert sorted((k, id(m)) for k, ms in nearest for m in ms) == sorted((lcp(t, q), id(m)) for t, m in held)
        assert len(index) == len(held)


@pytest.mark.parametrize("seed", range(40))
def test_the_best_member_that_fits_is_the_one_a_scan_of_those_that_fit_finds(seed):
    """``Reusable.best`` of the members ``fits`` takes (the disk's files memory can keep): the most a prompt can
    take of them, however many that do not fit share more with it."""
    from tinytitan.engine.cache.prefix_index import Reusable

    rng = random.Random(seed)
    one = sequences(rng)
    index, held = Reusable(), []
    for _ in range(30):
        t, trimmable, fits = one(), rng.random() < 0.7, rng.random() < 0.5
        m = (tuple(t), trimmable, fits)
        held.append(m)
        index.add(np.array(t, dtype=np.int64), m, trimmable)
        q = one()
        cap = len(q) - 1
        want = max([min(lcp(t, q), cap) for t, trim, ok in held if ok and trim]
                   + [len(t) for t, trim, ok in held if ok and not trim and len(t) <= cap and t == tuple(q[:len(t)])]
                   + [0])
        m, n = index.best(q, lambda m: m[2])
        assert n == (want if cap > 0 else 0)
        if n:
            t, trim, ok = m
            assert ok and (min(lcp(t, q), cap) == n if trim else t == tuple(q[:n]))
        assert index.best(q) == index.best(q, lambda m: True)  # (all fitting: as without ``fits``)


class Trimmable:
    """A stand-in KV cache that can be trimmed back (what the prompt cache asks of one)."""

    def __init__(self, offset: int, trimmable: bool = True):
        self.offset, self.nbytes, self.trimmable = offset, 8, trimmable

    def is_trimmable(self) -> bool:
        return self.trimmable

    def trim(self, n: int) -> int:
        self.offset -= n
        return n


def reusable_by_scan(cache: PromptCache, p: list[int]) -> int:
    """What the cache reused before the index: each entry compared with the prompt."""
    best = 0
    for e in cache.entries.values():
        n = min(lcp(list(e.tokens), p), len(p) - 1)
        if n > 0 and (n == len(e.tokens) or e.payload is None or kv_trimmable(e.payload)):
            best = max(best, n)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_the_cache_reuses_what_a_scan_of_every_entry_would(seed):
    rng = random.Random(seed)
    one = sequences(rng)
    cache = PromptCache(max_bytes=10 ** 6, max_entries=12)
    for _ in range(60):
        t = one()
        kind = rng.random()
        payload = None if kind < 0.2 else [Trimmable(len(t), trimmable=kind < 0.8)]
        if rng.random() < 0.5:
            cache.store(t, payload)
            if payload is None or payload[0].trimmable:  # what the new entry stands in for is gone
                assert not [e for e in cache.entries.values() if list(e.tokens) == t[:len(e.tokens)]
                            and len(e.tokens) < len(t)]
        p = one()
        want = reusable_by_scan(cache, p)
        probe = cache.probe(p)
        assert probe.n == max((lcp(list(e.tokens), p) for e in cache.entries.values()), default=0)
        kv, n = cache.fetch(p)
        assert n == want
        if n and kv is not None:
            assert kv[0].offset == n  # trimmed back to what the prompt shares, or taken whole


def test_a_whole_entry_is_taken_before_a_longer_one_is_copied():
    cache = PromptCache(max_bytes=10 ** 6)
    cache.store([1, 2, 3, 4, 5, 6], [Trimmable(6)])
    cache.store([1, 2, 3, 9], [Trimmable(4, trimmable=False)])  # not a prefix of the first: both kept
    cache.store([1, 2, 3], [Trimmable(3, trimmable=False)])  # a prefix of neither, reused only whole
    assert len(cache.entries) == 3
    kv, n = cache.fetch([1, 2, 3, 7, 7])
    assert n == 3 and len(cache.entries) == 2  # the entry holding just [1, 2, 3]: taken out, nothing copied
    assert sorted(len(e.tokens) for e in cache.entries.values()) == [4, 6]


def _kv(n: int, trimmable: bool) -> list:
    """A one-layer cache holding ``n`` positions: a KV cache, or a recurrent state that cannot be trimmed back."""
    import mlx.core as mx
    from mlx_lm.models.cache import ArraysCache, KVCache

    if not trimmable:
        c = ArraysCache(1)
        c[0] = mx.zeros((1, 2))
        return [c]
    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 1, n, 2)), mx.zeros((1, 1, n, 2)))
    return [c]


def test_the_disk_finds_the_file_a_scan_would_after_a_restart(tmp_path: Path):
    import base64

    from tinytitan.engine.cache.disk_files import read_metadata

    rng = random.Random(7)
    one = sequences(rng)
    head = list(range(1000, 1064))  # a file holds at least MIN_TOKENS ids
    disk = PromptDisk(tmp_path, [], lambda: "layout", max_bytes=1 << 30)
    for i in range(120):
        t = np.array(head + one() + [i], dtype=np.int64)
        disk.put(t, _kv(len(t), trimmable=i % 3 > 0), ())
        assert disk.flush()
    files = []
    for path in tmp_path.glob("*.safetensors"):
        meta = read_metadata(path)
        ids = np.frombuffer(base64.b64decode(meta["tinytitan_tokens"]), dtype=np.int32).tolist()
        files.append((ids, meta["tinytitan_trimmable"] != "0"))
    assert any(not trim for _, trim in files) and len(files) > 40
    restarted = PromptDisk(tmp_path, [], lambda: "layout", max_bytes=1 << 30)
    assert restarted.best(np.array(head + [1], dtype=np.int64))[1] == 64  # (waits for the directory's index)
    for _ in range(300):
        p = head[:rng.randrange(60, 65)] + one() + [rng.randrange(130)]
        cap = len(p) - 1
        want = max((k for ids, trim in files for k in [min(lcp(ids, p), cap)] if k > 0 and (trim or k == len(ids))),
                   default=0)
        f, n = restarted.best(np.array(p, dtype=np.int64))
        assert n == want and (f is None) == (want == 0)
        if f is not None:
            assert min(lcp(f.tokens.tolist(), p), cap) == n and (f.trimmable or n == len(f.tokens))
        assert restarted.peek(np.array(p, dtype=np.int64)) == (f, n)  # (the probe reports what a lookup reads)


def test_the_diagnosis_names_an_entry_whose_request_is_known_among_those_sharing_as_much():
    """Several entries share the longest prefix; the one reported (what the miss is diagnosed against) is one whose
    request is known, even where another lies nearer the prompt in the index's order."""
    cache = PromptCache(max_bytes=10 ** 6)
    cache.remember([1, 2, 3, 5, 5, 6], (), lambda ids: "", fingerprint="known")
    cache.store([1, 2, 3, 5, 5, 6], None)
    cache.store([1, 2, 3, 7, 7], None)  # read back from disk, say: no request known
    probe = cache.probe([1, 2, 3, 9, 9])
    assert (probe.n, probe.length, probe.fingerprint) == (3, 6, "known")
    probe = cache.probe([8, 8])  # nothing shared: the most recent entry whose request is known still says why
    assert (probe.n, probe.fingerprint) == (0, "known")


def test_a_checkpoint_takes_the_prompt_remembered_last_of_those_as_short():
    cache = PromptCache(max_bytes=10 ** 6)
    cache.remember([1, 2, 3, 4], (), lambda ids: "", fingerprint="earlier")
    cache.remember([1, 2, 3, 5], (), lambda ids: "", fingerprint="later")
    cache.remember([1, 2, 3, 4, 4], (), lambda ids: "", fingerprint="longer")
    cache.store([1, 2, 3], None, checkpoint=True)
    [e] = cache.entries.values()
    assert e.fingerprint == "later"


def test_an_entry_whose_answer_came_back_otherwise_gives_way_to_the_next_turn():
    """A client that sends the answer back otherwise (re-serialised, its thinking dropped) parts from the entry
    inside the answer: the next turn's entry holds all the old one held but that answer, which no later prompt
    repeats. It gave way to none, so every turn left a copy of the whole conversation."""
    cache = PromptCache(max_bytes=10 ** 6)
    system, other = list(range(100, 140)), list(range(500, 530))
    cache.remember(system + [1, 2], (), lambda ids: "")  # another conversation over the same system prompt
    cache.store(system + [1, 2, 77, 78], None)
    turn = system + [3, 4]
    for k in range(5):
        cache.remember(turn, (), lambda ids: "")
        cache.store(turn + [90 + k, 91 + k], None)  # what was generated
        turn = turn + [60 + k] + other[k:k + 3]  # the answer sent back otherwise, then a new user turn
    held = sorted(len(e.tokens) for e in cache.entries.values())
    assert held == [44, len(turn) - 4 + 2]  # the other conversation, and this one's last turn only
    assert cache.fetch(turn)[1] == len(turn) - 4  # the next turn still reads all but its own new part cached


def test_an_entry_whose_turn_the_next_prompt_writes_otherwise_gives_way_where_only_a_transient_opening_parts():
    """Where the part of a prompt a later turn repeats is known (all but a transient opening the template writes only
    for the turn it generates: prompt/rendering.py), the next turn supersedes its entry though it parts from it
    before the answer (Qwen3's empty think block). Sub-agents whose prompts part in their user turns keep theirs,
    so does the entry a side request forks (a user turn where the assistant's opened), and so does an entry whose
    lasting part is not known (the rule before)."""
    cache = PromptCache(max_bytes=10 ** 6)
    system, opening = list(range(100, 140)), [7, 8, 9]  # the generation prompt: header 7, transient opening 8, 9
    for task in ([1, 2], [1, 3]):  # two sub-agents over the same system prompt, one token apart
        prompt = system + task + opening
        cache.remember(prompt, (), lambda ids: "", lasting_prompt=len(prompt) - 2)
        cache.store(prompt + [90, 91], None)
    cache.remember(system + [5] + opening, (), lambda ids: "")  # a third: its lasting part is not known
    cache.store(system + [5] + opening + [92], None)
    turn = system + [1, 2]
    for k in range(4):
        side = turn + [6, 6] + opening  # a side request: the conversation, then a user turn of its own
        cache.remember(side, (), lambda ids: "", lasting_prompt=len(side) - 2)
        cache.store(side + [93], None)
        assert any(len(e.tokens) == len(turn) + 5 for e in cache.entries.values())  # the turn's entry stays
        turn = turn + [7, 60 + k, 61 + k] + [3, 3, 3]  # answered (without its opening), then a new user turn
        prompt = turn + opening
        cache.remember(prompt, (), lambda ids: "", lasting_prompt=len(turn) + 1)
        cache.store(prompt + [95, 96], None)
    held = sorted(len(e.tokens) for e in cache.entries.values() if 93 not in e.tokens)
    assert held == [len(system) + 5, len(system) + 7, len(turn) + 5]  # the third, the other, this one's last
    assert cache.fetch(turn + [7, 62, 3] + opening)[1] == len(turn) + 1  # the next turn reads all it repeats cached


def test_only_an_entry_whose_own_answer_was_final_gives_way_to_the_request_after_it():
    """Two entries of one tool loop's request (copies sent in parallel, say, whose prompts differ at their end so
    neither supersedes the other by its ids), answered two ways: one finally, one with a tool call. The request
    after the final answer continues the request of both, but only the entry whose own generation finished with
    no call gives way to it: the other copy's loop goes on from its entry. (Its ids part from both far back: the
    template dropped the loop's thinking.)"""
    from tinytitan.chat_request import ChatRequest, Message, ToolCall
    from tinytitan.engine.cache.miss import Fingerprint

    loop = ChatRequest("m", (Message("user", "Look at a.py."),
                             Message("assistant", "", (ToolCall("call_1", "read", "{}"),), reasoning="Read it."),
                             Message("tool", "x = 1", tool_call_id="call_1")))
    after = loop.with_(messages=loop.messages + (Message("assistant", "It sets x."), Message("user", "Next.")))
    cache = PromptCache(max_bytes=10 ** 6)
    keys = {}
    for end, answer in ((1, "final"), (2, "calls")):
        prompt = list(range(100, 160)) + [end]  # with the loop's thinking
        cache.remember(prompt, (), lambda ids: "", Fingerprint.of(loop))
        keys[answer] = cache.store(prompt + [90, 91], None)
    cache.answered_finally(keys["final"])
    then = list(range(100, 120)) + [7, 7, 7]  # parts far back: the thinking dropped
    cache.remember(then, (), lambda ids: "", Fingerprint.of(after))
    cache.store(then + [95], None)
    assert keys["final"] not in cache.entries and keys["calls"] in cache.entries
