"""A follower's rows leave as rank 0's did (group/lockstep.py's rules): a row the follower's own fold ends stays
in its table until rank 0's message retires it, every row in the order rank 0 retired them, so each rank's prompt
cache stores the same entries in the same order; then the entries of the turns rank 0's parser saw end with no
tool call are marked final answers'. (tests/test_distributed.py runs whole groups.)"""

from __future__ import annotations

from types import SimpleNamespace

from tinytitan.engine.cache.entries import Kept
from tinytitan.engine.decode.rows import Ending
from tinytitan.engine.group.lockstep import FollowerScheduler


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
