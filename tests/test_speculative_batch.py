"""A drafting request drafts in the batch (its draft verified in the batch's one forward pass, beside rows
reading one token) and on its own once the others have finished: when the batch is down to it, it steps out
onto its own KV cache with its lane (nothing read or drawn again) and drafts on — and it answers exactly what
it answers decoded alone without drafts: greedy (a repetition penalty too), with a JSON schema, seeded
sampling, with the other request cancelled, with a draft model (whose one proposer the other request had
meanwhile), thinking first, cut by a stop string, capped. The parts: test_speculative.py; a lone request
through the engine: test_speculative_serving.py.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import trio

from backends import script_forcer
from batching_helpers import RECORDS, req, run, summary
from speculative_helpers import COPY_TEXT


def copy_req(**kw):
    kw.setdefault("max_tokens", 80)
    return req("Show this again, exactly:\n" + COPY_TEXT, **kw)


SHORT = req("Name a colour.", max_tokens=4)
LONG = req("Count to a hundred.", max_tokens=2000)  # decodes until it is cancelled


@pytest.fixture
def watched(monkeypatch):
    """Which rows joined the batch, and for each row that stepped out of it the speculator with its counts
    then (drafted, accepted); once armed (the last list), the first request alone waits at its first look for
    the second to arrive, so the two share the batch however loaded the machine is. The fifth list: the
    batch steps of the rows (their shapes), as planned."""
    from tinytitan.engine.decode import decoder, scheduler

    joined, left, armed, admitted, stepped = [], [], [], [], []
    real_fold, real_joins = scheduler.Scheduler.fold, decoder.Decoder._next_joins
    real_admit = scheduler.Scheduler.admit

    def admit(self, row):
        admitted.append(row)
        return real_admit(self, row)

    def next_joins(self, scheduler, later):
        if armed and len(admitted) - armed[0] == 1:  # the first of the two is in, alone
            armed.clear()
            deadline = time.monotonic() + 30
            while not (self.waiting or later) and time.monotonic() < deadline:
                time.sleep(0.002)
        return real_joins(self, scheduler, later)

    def fold(self, plan, result):
        joined.extend(self.rows[i] for i in plan.join if i not in result.failed)
        for row_id in plan.leave:
            if row_id not in result.failed:
                row = self.rows[row_id]
                left.append((row, row.speculator, row.speculator.drafted, row.speculator.accepted))
        stepped.extend((self.rows[s.row], s) for s in plan.batch)
        return real_fold(self, plan, result)

    monkeypatch.setattr(scheduler.Scheduler, "fold", fold)
    monkeypatch.setattr(decoder.Decoder, "_next_joins", next_joins)
    monkeypatch.setattr(scheduler.Scheduler, "admit", admit)
    return joined, left, armed, admitted, stepped


async def together(engine, main, other, stop_other_after=None) -> list:
    """``main`` and ``other`` sent at once; ``main``'s events."""
    got: dict = {}
    async with trio.open_nursery() as n:
        async def one(name, r, stop_after=None):
            got[name] = await run(engine, r, stop_after)

        n.start_soon(one, "main", main)
        n.start_soon(one, "other", other, stop_other_after)
    return got["main"]


def drafted_after_the_batch(watched, events, accepted_all=False, accepts=True):
    """``events``' row joined the batch, stepped out of it once the other had gone, and drafted after that
    (accepted tokens too, unless not ``accepts``); its turn reports each drafted token once."""
    joined, left, _, _, _ = watched
    [(row, spec, drafted, accepted)] = left
    assert row in joined
    assert spec.drafted > drafted and (spec.accepted > accepted or not accepts)
    if accepted_all:
        assert spec.accepted - accepted == spec.drafted - drafted
    timing = events[-1].timing
    assert (timing.draft_tokens, timing.draft_accepted_tokens) == (spec.drafted, spec.accepted)


async def check(engine, main, other, watched, stop_other_after=None, accepted_all=False, accepts=True):
    from tinytitan.events import Finished

    expected = summary(await run(engine, dataclasses.replace(main, speculative=False)))
    watched[2].append(len(watched[3]))  # armed: rows admitted before the two
    got = await together(engine, main, other, stop_other_after)
    assert isinstance(got[-1], Finished)
    assert summary(got) == expected
    drafted_after_the_batch(watched, got, accepted_all, accepts)
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)
    return got


@pytest.mark.parametrize("penalty", [None, 1.3], ids=["plain", "repetition-penalty"])
async def test_a_request_left_alone_in_the_batch_drafts_again_and_answers_as_without(demo_backend, watched,
                                                                                     penalty):
    """With a repetition penalty its logits processors see the token context they see alone: its prompt and
    its answer so far, the part decoded in the batch included (the penalty keeps it from copying much: its
    drafts are verified, not necessarily accepted)."""
    from tinytitan.engine.engine import Engine

    got = await check(Engine(demo_backend, max_batch=4), copy_req(repetition_penalty=penalty), SHORT, watched,
                      accepts=penalty is None)
    assert got[-1].usage.completion_tokens > 40  # most of its answer came after the short one ended


async def test_a_schema_constrained_request_drafts_again_after_the_batch(demo_backend, watched):
    """Its grammar matcher stands where the batch left it, less the token the batch consumed ahead: the mask,
    the forced tokens drafted after it and the document are what it decodes alone."""
    from tinytitan.engine.engine import Engine

    main = req("List two records, as in: [{\"name\": \"add\", \"count\": 1}]", max_tokens=150, grammar=RECORDS)
    await check(Engine(demo_backend, max_batch=4), main, SHORT, watched)


async def test_a_seeded_sampled_request_drafts_again_after_the_batch_with_the_same_tokens(demo_backend, watched):
    """The batch drew the token after the last one it handed out with the row's key; that draw is taken back,
    so the row draws that position again, alone, with the same key."""
    from tinytitan.engine.engine import Engine

    main = copy_req(temperature=0.7, top_k=2, seed=1234, max_tokens=150)  # two tokens to choose from: drafts are accepted
    got = await check(Engine(demo_backend, max_batch=4), main, SHORT, watched)
    greedy = summary(await run(Engine(demo_backend, max_batch=4), dataclasses.replace(main, temperature=0)))
    assert summary(got) != greedy  # really sampled


async def test_a_request_drafts_again_once_the_other_is_cancelled(demo_backend, watched):
    """Drafts again once alone, answering as without drafts. Whether a draft is accepted after that depends on
    where in its answer the cancellation leaves it (the demo model's random weights copy only in stretches):
    acceptance is checked by the tests above, where the other request's end is not a matter of timing."""
    from tinytitan.engine.engine import Engine

    await check(Engine(demo_backend, max_batch=4), copy_req(), LONG, watched, stop_other_after=3, accepts=False)


async def test_with_a_draft_model_the_request_left_alone_drafts_from_its_own_history(demo_backend, watched):
    """One draft model serves the server's requests, each request drafting with a draft cache of its own
    (the backend's pool), in the batch and alone: the draft model (here the model itself) then guesses every
    token right."""
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.speculative.speculator import SpeculativeConfig

    drafting = MLXBackend(demo_backend.path, demo_backend.model_id,
                          speculative=SpeculativeConfig(lookup=False, draft_model=demo_backend.path))
    short = req("Name a colour and say why you like it.", max_tokens=6)
    await check(Engine(drafting, max_batch=4), copy_req(max_tokens=40), short, watched, accepted_all=True)


# -- reasoning channels and stop strings -------------------------------------------------------------------------
THOUGHT = "<think>\n" + COPY_TEXT + "</think>\n\n" + COPY_TEXT + "# done, as asked\n"


@pytest.fixture
def thinking(demo_backend, monkeypatch):
    """The demo model, made to think the file over and then write it out (a logits processor forcing that
    text, by position: a verify step asks it about positions whose draft may be rejected)."""
    real = demo_backend.logits_processors
    script = demo_backend.tokenizer.encode(THOUGHT, add_special_tokens=False)
    end = min(demo_backend.tokenizer.eos_token_ids)

    def processors(prepared, loop):
        said = " ".join(m.content for m in prepared.req.messages)
        return real(prepared, loop) + ([script_forcer(script, end)] if said.startswith("Think it over") else [])

    monkeypatch.setattr(demo_backend, "logits_processors", processors)
    return demo_backend


@pytest.mark.parametrize("stop", [None, "as asked"])
async def test_a_thought_and_a_stop_string_after_the_batch_are_what_they_are_alone(thinking, watched, stop):
    """It thinks the file over and writes it out, drafted again after the batch: its reasoning and its answer
    arrive on their channels, the stop string cuts it where it does alone, and usage counts each token once
    (reasoning tokens apart) as alone."""
    from tinytitan.engine.engine import Engine

    main = req("Think it over, then show this again:\n" + COPY_TEXT, reasoning="high", max_tokens=400,
               stop=(stop,) if stop else ())
    got = await check(Engine(thinking, max_batch=4), main, SHORT, watched)
    finished = got[-1]
    assert finished.usage.reasoning_tokens > 20
    assert finished.reason == ("stop_sequence" if stop else "stop")


async def test_a_row_that_cannot_step_out_of_the_batch_fails_alone(demo_backend, watched, monkeypatch):
    """Something failing as a row steps out of the batch fails that row, in-band, and frees its place: the
    decoder goes on with the next request."""
    from tinytitan.engine.decode import step
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Failed, Finished

    def broken(self, row_id):
        raise RuntimeError("its cache would not come out")

    monkeypatch.setattr(step.Forward, "_leave", broken)
    engine = Engine(demo_backend, max_batch=4)
    watched[2].append(len(watched[3]))  # the two share the batch
    main = await together(engine, copy_req(), SHORT)
    assert isinstance(main[-1], Failed) and "its cache would not come out" in main[-1].message
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)
    assert isinstance((await run(engine, SHORT))[-1], Finished)


# -- drafting inside the batch --------------------------------------------------------------------------------
async def alone_then_together(engine, watched, a, b) -> dict:
    """``a`` and ``b`` decoded each alone without drafts, then together in the batch (the watch armed, so they
    share it): checks each answers as it did alone; the events of each, by name ("a", "b")."""
    expected = [summary(await run(engine, dataclasses.replace(r, speculative=False))) for r in (a, b)]
    watched[2].append(len(watched[3]))
    got: dict = {}
    async with trio.open_nursery() as n:
        async def one(name, r):
            got[name] = await run(engine, r)

        n.start_soon(one, "a", a)
        n.start_soon(one, "b", b)
    assert [summary(got["a"]), summary(got["b"])] == expected
    return got


async def test_two_copying_requests_draft_inside_the_batch_and_answer_as_without(demo_backend, watched,
                                                                                  monkeypatch):
    """Two requests copying text decode together: each verifies its drafts in the batch's forward pass (several
    tokens for it beside one for the other, or both drafting), accepts some, and answers exactly what it
    answers alone without drafts (greedy, and seeded sampling). Every draft is verified here (how wide a
    batch's drafts may make it depends on the machine's timings: tested apart, below)."""
    from tinytitan.engine.decode.plan import Verify
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.speculative.batch_width import BatchWidth

    monkeypatch.setattr(BatchWidth, "fit", lambda self, steps, rows: steps)
    monkeypatch.setattr(BatchWidth, "pays", lambda self, drafting, rows: True)

    engine = Engine(demo_backend, max_batch=4)
    a = copy_req(max_tokens=120)
    b = copy_req(temperature=0.7, top_k=2, seed=77, max_tokens=120)
    got = await alone_then_together(engine, watched, a, b)
    verifies = [(row, s) for row, s in watched[4] if isinstance(s, Verify)]
    assert len({id(row) for row, _ in verifies}) == 2  # both drafted in the batch
    wide = [s for _, s in verifies if len(s.drafts) >= 2]
    assert wide
    timing = [got[k][-1].timing for k in "ab"]
    assert all(t.draft_accepted_tokens > 0 for t in timing)
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)


async def test_a_grammars_forced_runs_are_read_in_one_pass_in_the_batch(demo_backend, watched):
    """A constrained request beside another in the batch feeds its grammar's forced runs (keys, punctuation)
    as several tokens in one pass, and writes what it writes alone."""
    from tinytitan.engine.decode.plan import Sample
    from tinytitan.engine.engine import Engine

    engine = Engine(demo_backend, max_batch=4)
    main = req("List two records.", max_tokens=150, grammar=RECORDS, speculative=False)
    expected = summary(await run(engine, main))
    watched[2].append(len(watched[3]))
    got = {}
    async with trio.open_nursery() as n:
        async def one(name, r, stop_after=None):
            got[name] = await run(engine, r, stop_after)

        n.start_soon(one, "main", main)
        n.start_soon(one, "other", req("Count to ten.", max_tokens=300, speculative=False))
    assert summary(got["main"]) == expected
    runs = [s for row, s in watched[4] if isinstance(s, Sample) and s.forced and len(s.tokens) > 1]
    assert runs  # forced runs fed whole in the batch


class _Policy:
    def __init__(self, drafted, accepted):
        self.drafted, self.accepted = drafted, accepted

    def k(self):
        return 8

    def acceptance(self):
        return (self.accepted + 1) / (self.drafted + 2)


class _Spec:
    def __init__(self, drafted, accepted):
        self.drafted, self.accepted, self.policy = drafted, accepted, _Policy(drafted, accepted)


class _Row:
    def __init__(self, drafted=0, accepted=0):
        self.speculator = _Spec(drafted, accepted)


def test_the_batch_cuts_drafts_to_the_width_that_pays():
    """Fitted from the batch's own timings (a + b × rows × width): where a wider pass is nearly free (a GPU),
    a copying row's draft is verified whole; where each token slot costs (a CPU), a row whose drafts are rarely accepted
    is cut to nothing and the batch stays one token wide, while rows that copy (most drafts accepted) still
    draft; a grammar's forced run is never cut. Until two widths have been timed, drafts are taken as they
    are (so the fit learns what a wider pass costs)."""
    from tinytitan.engine.decode.plan import Next, Sample, Verify
    from tinytitan.engine.speculative.batch_width import BatchWidth

    steps = [Verify(0, (5,), (1, 2, 3, 4, 5, 6, 7, 8)), Next(1), Next(2), Next(3)]
    guessing = {0: _Row(100, 5), 1: _Row(), 2: _Row(), 3: _Row()}
    copying = {0: _Row(100, 95), 1: _Row(), 2: _Row(), 3: _Row()}
    cheap, dear = BatchWidth(), BatchWidth()
    assert dear.fit(steps, guessing) == steps  # nothing timed yet
    for width in (1, 1, 2, 4, 1, 8):
        plan = [Verify(0, (5,), tuple(range(width - 1))) if width > 1 else Next(0), Next(1), Next(2), Next(3)]
        cheap.observe(tuple(plan), 0.030 + 0.0001 * 4 * width)
        dear.observe(tuple(plan), 0.010 + 0.005 * 4 * width)
    assert cheap.fit(steps, copying) == steps
    assert dear.fit(steps, guessing) == [Sample(0, (5,)), Next(1), Next(2), Next(3)]
    all_copying = [Verify(i, (5,), (1, 2, 3, 4, 5, 6, 7, 8)) for i in range(4)]
    rows = {i: _Row(100, 97) for i in range(4)}
    assert all(isinstance(s, Verify) and len(s.drafts) >= 2 for s in dear.fit(all_copying, rows))
    # before a row reads its token for a draft: one guessing row alone would not pay, copying rows together do
    assert cheap.pays([copying[0]], 4) and not dear.pays([guessing[0]], 4)
    assert dear.pays([rows[i] for i in range(4)], 4)
    forced = [Sample(0, (1, 2, 3, 4, 5, 6), forced=True), Verify(1, (5,), (1, 2, 3)), Next(2), Next(3)]
    got = dear.fit(forced, {0: _Row(), 1: _Row(100, 5), 2: _Row(), 3: _Row()})
    assert got[0] == forced[0] and got[2:] == forced[2:]  # the run whole; the guess kept within its width


async def test_a_batch_row_at_its_cap_queues_no_pass_after_its_last_token(demo_backend, watched, monkeypatch):
    """A drafting batch row whose next token is the last its cap allows reads it with nothing queued after it
    (``Take``), not held for a draft (``Next(hold)``: a pass sampling a token it can never use); and the answers
    are what they are without drafts."""
    from tinytitan.engine.decode import scheduler
    from tinytitan.engine.decode.plan import Next
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.speculative.batch_width import BatchWidth

    monkeypatch.setattr(BatchWidth, "fit", lambda self, steps, rows: steps)
    monkeypatch.setattr(BatchWidth, "pays", lambda self, drafting, rows: True)
    at_cap, real_plan = [], scheduler.Scheduler.plan

    def plan(self, waiting):
        p = real_plan(self, waiting)
        at_cap.extend(s for s in p.batch if self.rows[s.row].cap_left <= 1)
        return p

    monkeypatch.setattr(scheduler.Scheduler, "plan", plan)
    engine = Engine(demo_backend, max_batch=4)
    for cap in (30, 41, 52):
        a, b = copy_req(max_tokens=cap), copy_req(max_tokens=cap + 3)
        await alone_then_together(engine, watched, a, b)
    assert at_cap and not [s for s in at_cap if isinstance(s, Next) and s.hold]
