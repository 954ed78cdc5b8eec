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
    import pytest

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
    cache.clear()  # (the session's other tests leave entries that share the template's opening)
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
    assert cache.fetch(prefix + [0])[1] < len(prefix)  # rank 0 took the entry, and kept nothing of the row
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
        assert cache.fetch(prefix + [0])[1] < len(prefix), fails_here
    assert lead.ended == []  # (no ending follows: it never stepped)
    # a follower whose cache gives the row another prefix than rank 0's did has diverged, as for any row
    keep_prefix()
    with pytest.raises(RuntimeError, match=rf"diverged: its prompt cache starts row \d+ at {len(prefix)} tokens, "
                                           rf"rank 0's at {len(prefix) - 1}"):
        FollowerScheduler(backend, 4, True).open_row(follower_row(backend, spec), spec["id"], len(prefix) - 1,
                                                     failed=True)


def test_a_row_that_failed_on_the_old_model_is_opened_there_when_its_join_rides_on_a_switch(monkeypatch):
    """A catalog on a group: a row of model X fails after asking X's prompt cache, leaving the table empty, and
    the next row names model Y. Rank 0 switches (``m``) before its next step, so the failed row's join rides
    on the switch's message: a follower opens it on X, then switches — before, it switched first and had no
    decoder left to open the row on, and crashed (the group broke)."""
    import json

    import pytest

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.decode.plan import PREFILL_STEP
    from tinytitan.engine.decode.rows import LEFT, Row
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.group import follower
    from tinytitan.engine.group.lockstep import Lead
    from tinytitan.engine.prompt.raw import VerbatimParser

    x = MLXBackend(ensure_demo_model(), "x")
    y = MLXBackend(ensure_demo_model(), "y", lazy=True)
    sent: list[dict] = []
    lead = Lead(SimpleNamespace(broken=None, share=lambda msg=None, **_kw: sent.append(json.loads(json.dumps(msg)))))

    def load(backend):  # as the engine loads a catalog's model: every rank switches first
        if backend.loaded:
            return None
        lead.switch(backend.model_id)
        backend.ensure_loaded()
        return 0.0

    scheduler = lead.scheduler(load, 4, PREFILL_STEP, True)

    def row(backend, text):
        prepared = backend.prepare(ChatRequest(model=backend.model_id, max_tokens=4, temperature=0.0,
                                               messages=(Message("user", text),)))
        return Row(backend, prepared, loop=DecodeLoop(VerbatimParser(), (), lambda _event: None),
                   should_stop=lambda: False)

    first = row(x, "A first row on x.")
    scheduler.admit(first)
    lead.send(None, True)
    first.ending = LEFT
    scheduler.retire(first)
    lead.send(None, True)
    with monkeypatch.context() as patched:
        patched.setattr(x, "sampler_for", lambda *_a: (_ for _ in ()).throw(ValueError("no sampler")))
        scheduler.admit(row(x, "A row that fails on x after asking its cache."))
    scheduler.admit(row(y, "A row on y."))
    switch = sent[-1]
    assert switch["m"] == "y" and [s.get("failed") for s in switch["j"]] == [1] and "f" not in switch

    opened = []
    open_row = follower.FollowerScheduler.open_row

    def recorded(self, row, *args):
        opened.append((row.backend.model_id, args))
        return open_row(self, row, *args)

    monkeypatch.setattr(follower.FollowerScheduler, "open_row", recorded)
    messages = iter(sent)
    with pytest.raises(StopIteration):  # every message read, none refused
        follower.follow(SimpleNamespace(rank=1, share=lambda report=False: next(messages)), [x, y], 4)
    assert [(model, args[-1]) for model, args in opened] == [("x", False), ("x", True)]



def test_a_row_whose_opening_reads_its_prompt_ends_alike_on_every_rank():
    """Echo with ``max_tokens: 0`` of a prompt cached but its last token: its opening has read all it reads, and
    it has nothing to sample, so it ends there. Every rank keeps the same entry of it — before, rank 0 ended it
    inside its admission, announced it as failed there, and a follower kept nothing of what rank 0 kept: the
    next request on that prefix stopped the group, diverged."""
    import json

    import mlx.core as mx
    import pytest

    from tinytitan.chat_request import ChatRequest
    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.decode.plan import PREFILL_STEP
    from tinytitan.engine.decode.rows import Row
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.group import follower
    from tinytitan.engine.group.lockstep import Lead
    from tinytitan.engine.prompt.raw import VerbatimParser
    from tinytitan.events import Finished, Started

    ranks = MLXBackend(ensure_demo_model(), "m"), MLXBackend(ensure_demo_model(), "m")
    ids = tuple(ranks[0].tokenizer.encode("The sea is calm tonight", add_special_tokens=False))
    for backend in ranks:  # each rank's cache holds the prompt but its last token (an earlier request's)
        backend.ensure_loaded()
        kv = backend.new_cache(backend.model)
        backend.model(mx.array([ids[:-1]]), cache=kv)
        mx.eval([c.state for c in kv])
        backend.prompt_cache.store(list(ids[:-1]), kv)
    sent: list[dict] = []
    lead = Lead(SimpleNamespace(broken=None, share=lambda msg=None, **_kw: sent.append(json.loads(json.dumps(msg)))))
    scheduler = lead.scheduler(lambda _backend: None, 4, PREFILL_STEP, True)
    prepared = ranks[0].prepare(ChatRequest(model="m", prompt="", prompt_ids=ids, messages=(), max_tokens=0,
                                            temperature=0.0))
    events: list = []
    scheduler.admit(Row(ranks[0], prepared, loop=DecodeLoop(VerbatimParser(), (), events.append),
                        should_stop=lambda: False))
    while scheduler.rows:
        scheduler.step(lambda: False)
    lead.send(None, True)
    assert [type(ev) for ev in events] == [Started, Finished] and events[-1].reason == "length"
    assert [spec.get("failed") for msg in sent for spec in msg.get("j", ())] == [None]
    assert [e[1] for msg in sent for e in msg["e"]] == ["finished"]

    messages = iter(sent)
    with pytest.raises(StopIteration):  # every message read, none refused
        follower.follow(SimpleNamespace(rank=1, share=lambda report=False: next(messages)), [ranks[1]], 4)
    kept = [[[int(t) for t in e.tokens] for e in b.prompt_cache.entries.values()] for b in ranks]
    assert kept[0] == kept[1] == [list(ids[:-1])]  # (the KV its prompt but the last token left)
