"""A follower's rows leave as rank 0's did (group/lockstep.py's rules): a row the follower's own fold ends stays
in its table until rank 0's message retires it, every row in the order rank 0 retired them, so each rank's prompt
cache stores the same entries in the same order; then the entries of the turns rank 0's parser saw end with no
tool call are marked final answers'. (tests/test_distributed.py runs whole groups.)"""

from __future__ import annotations

from types import SimpleNamespace

from tinytitan.engine.cache.entries import Kept
from tinytitan.engine.decode.rows import Ending
from tinytitan.engine.group.follower import FollowerScheduler


class Recorded:
    """What the follower does with the rows and its prompt cache, in order."""

    def __init__(self):
        self.done: list[tuple] = []
        self.prompt_cache = SimpleNamespace(answered_finally=lambda key: self.done.append(("final", key)))

    def row(self, row_id: int, ending: Ending | None = None, key: int | None = None):
        row = SimpleNamespace(id=row_id, ending=ending, kept=None, final=False, backend=self)

        def end(kv, like=None):
            self.done.append(("end", row_id, row.ending.kind, like))
            row.kept = key  # what its end keeps (the row's own parser knows no tool call: rank 0 says)
        row.end = end
        return row


def test_a_follower_retires_its_rows_in_rank_0s_order_then_marks_the_final_answers(demo_backend):
    record = Recorded()
    scheduler = FollowerScheduler(demo_backend, 4, False)
    scheduler.forward = SimpleNamespace(release=lambda row_id: None, close=lambda: None)
    ended_here = record.row(1, Ending("finished"), key=11)  # its end of turn, seen by this rank's fold
    stopped_there = record.row(2, key=12)  # a stop string only rank 0 sees: still decoding here
    failed_there = record.row(3, Ending("finished"), key=13)
    going_on = record.row(4)
    scheduler.rows.update({1: ended_here, 2: stopped_there, 3: failed_there, 4: going_on})

    scheduler.retire(ended_here)  # the fold's retirement waits for rank 0's message
    assert record.done == [] and 1 in scheduler.rows

    # rank 0 retired 2 (its stop string) before 1 in its fold, 3 failed there; 1 and 2 ended with no tool call
    # and what it kept of each (ids, bytes): what this rank keeps of them
    scheduler.settle([[2, "finished", 1, 40, 4096], [1, "finished", 1, 30, 2048], [3, "failed", 0, 0, 0]])
    assert record.done == [("end", 2, "left", Kept(40, 4096)), ("end", 1, "finished", Kept(30, 2048)),
                           ("end", 3, "failed", Kept(0, 0)), ("final", 12), ("final", 11)]
    assert list(scheduler.rows) == [4]


def test_a_row_that_ended_on_a_follower_alone_is_a_divergence_when_rank_0_steps_it(demo_backend):
    """Its own hook failed there, say: rank 0's fold did not end it, and its next plan steps it. The follower
    stops, diverged, rather than step a row it has given up (or store less of it than rank 0 does)."""
    import pytest

    from tinytitan.engine.decode.plan import Next, Plan

    record = Recorded()
    scheduler = FollowerScheduler(demo_backend, 4, False)
    scheduler.forward = SimpleNamespace(run=lambda plan, rows: None, release=lambda row_id: None, close=lambda: None)
    scheduler.rows[1] = record.row(1, Ending("failed", error=ValueError("its sampler failed")))
    with pytest.raises(RuntimeError, match=r"diverged: rank 0's plan steps row 1, but it ended here \(failed: its"):
        scheduler.run(Plan((), (Next(1),), (), (), ()))
    with pytest.raises(RuntimeError, match="row 2, but it is not open here"):
        scheduler.run(Plan((), (Next(2),), (), (), ()))


def test_a_row_that_fails_on_rank_0_after_taking_its_prefix_takes_it_on_every_rank(demo_backend, monkeypatch):
    """Its opening took the prompt cache's entry for its prefix (a whole entry leaves the cache), then failed (its
    sampler could not be made). Rank 0's message announces it, marked failed: a follower takes the same entry
    and keeps nothing of it, as rank 0 did, so the two caches stay alike for the next request — before, the
    follower still held the entry, and the next request on that prefix stopped the group, diverged."""
    import mlx.core as mx

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode.plan import PREFILL_STEP
    from tinytitan.engine.decode.rows import Row
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.group.follower import follower_row
    from tinytitan.engine.group.lockstep import Lead
    from tinytitan.engine.prompt.raw import VerbatimParser

    backend = demo_backend
    backend.ensure_loaded()
    cache = backend.prompt_cache
    prepared = backend.prepare(ChatRequest(model=backend.model_id, max_tokens=4, temperature=0.0,
                                           messages=(Message("user", "A prefix only this test keeps: 7f3e9."),)))
    prefix = prepared.tokens[:-3]

    def keep_prefix():
        kv = backend.new_cache(backend.model)
        backend.model(mx.array([prefix]), cache=kv)
        mx.eval([c.state for c in kv])
        cache.store(prefix, kv)
        assert cache.fetch(prefix + [0])[1] == len(prefix)  # (a whole entry: fetched, it left the cache)
        cache.store(prefix, kv)

    def cannot_sample(*_args):
        raise ValueError("no sampler for it")

    keep_prefix()
    monkeypatch.setattr(backend, "sampler_for", cannot_sample)
    lead = Lead(SimpleNamespace(broken=None))
    scheduler = lead.scheduler(lambda _backend: None, 4, PREFILL_STEP, True)
    row = Row(backend, prepared, loop=DecodeLoop(VerbatimParser(), (), lambda _event: None),
              should_stop=lambda: False)
    scheduler.admit(row)
    assert row.ending.kind == "failed" and not scheduler.rows
    assert cache.fetch(prefix + [0]) == (None, 0)  # rank 0 took the entry, and kept nothing of the row
    [spec] = lead.joined
    assert spec["failed"] == 1 and spec["cached"] == len(prefix) and spec["tokens"] == prepared.tokens

    # a follower: its cache as rank 0's was; the row fails here too, or opens (a fault of rank 0's alone)
    for fails_here in (True, False):
        keep_prefix()
        if not fails_here:
            monkeypatch.undo()
        follower = FollowerScheduler(backend, 4, True)
        follower.open_row(follower_row(backend, spec), spec["id"], spec["cached"], failed=True)
        assert not follower.rows
        assert cache.fetch(prefix + [0]) == (None, 0), fails_here
    assert lead.ended == []  # (no ending follows: it never stepped)
