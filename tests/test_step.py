"""The decode step's plan is plain data (what lockstep decoding broadcasts), and the step is one for a lone
request and a batch: a lone request's plans and a batch's are made by the same scheduler."""

from __future__ import annotations

import dataclasses

import pytest

from tinytitan.engine.decode.step import Next, Plan, Prefill, Sample, Take, Verify

PLANS = [
    Plan(),
    Plan(alone=(Prefill(0, (5, 6, 7)),)),
    Plan(cancel=(3,), alone=(Next(1), Sample(2, (9, 10), forced=True), Sample(4, (1, 2, 3), now=True),
                             Sample(9, (4,)), Take(10)), join=(5, 6), batch=(Next(5), Sample(6, (8,)))),
    Plan(alone=(Verify(7, (11,), (12, 13, 14)),), batch=(Next(2, hold=True), Verify(3, (5,), (6, 7)))),
    Plan(cancel=(1,), leave=(8,)),
    Plan(join=(2, 3), batch=(Sample(2, (4, 5, 6), forced=True), Next(3))),
]


def arrive_together(monkeypatch, n: int) -> None:
    """The next ``n`` rows submitted reach the decoder at once, as a client's burst would: none starts decoding
    alone before the others arrive (their prompts are prepared on worker threads, one after another)."""
    from tinytitan.engine.decode.decoder import Decoder

    held, real_submit = [], Decoder.submit

    def submit(self, row):
        held.append(row)
        if len(held) == n:
            with self._lock:
                self._inbox.extend(held[:-1])
            real_submit(self, held[-1])

    monkeypatch.setattr(Decoder, "submit", submit)


def forward_on_host(monkeypatch, host: bool) -> None:
    """Every forward made from now on runs its passes on the host (mlx on a CPU) or not (a GPU), whatever mlx's
    default device is on this machine: what decides whether a first sample is read at once."""
    from tinytitan.engine.decode import step

    real_init = step.Forward.__init__

    def init(self, *a):
        real_init(self, *a)
        self.first_read_at_once = host

    monkeypatch.setattr(step.Forward, "__init__", init)


@pytest.mark.parametrize("plan", PLANS)
def test_a_plan_goes_through_a_flat_list_of_ints_unchanged(plan):
    ints = plan.as_ints()
    assert all(type(i) is int for i in ints)
    assert Plan.from_ints(ints) == plan


def test_a_plan_holds_only_ids_tokens_and_flags():
    """Nothing in a plan is an array, a cache or a callable, and it cannot be changed once made."""
    def leaves(value):
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                yield from leaves(getattr(value, f.name))
        elif isinstance(value, tuple):
            for v in value:
                yield from leaves(v)
        else:
            yield value

    for plan in PLANS:
        assert all(type(v) in (int, bool) for v in leaves(plan))
    with pytest.raises(dataclasses.FrozenInstanceError):
        PLANS[2].batch = ()


async def test_the_lone_request_and_the_batch_are_planned_by_one_scheduler(demo_backend, monkeypatch):
    """A lone request (max_batch 1, MLXBackend.decode, a request alone in a batching engine) and a batch are
    plans of the same Scheduler, and every row it plans ends through Row.end once."""
    import trio

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.decode.rows import Row

    plans, ended = [], []
    real_plan, real_end = Scheduler.plan, Row.end
    monkeypatch.setattr(Scheduler, "plan", lambda self, w: plans.append(real_plan(self, w)) or plans[-1])
    monkeypatch.setattr(Row, "end", lambda row, kv=None, like=None: ended.append(row) or real_end(row, kv, like))

    def req(text):
        return ChatRequest(model="tinytitan-demo", messages=(Message("user", text),), max_tokens=6,
                           temperature=0, reasoning=False)

    async def run(engine, r):
        async with engine.session(r) as events:
            return [ev async for ev in events]

    await run(Engine(demo_backend, max_batch=1), req("one"))
    prepared = demo_backend.prepare(req("two"))
    demo_backend.decode(prepared, DecodeLoop(demo_backend.parser(prepared), (), lambda ev: None), lambda: False)
    lone = len(plans)
    assert lone and not any(p.batch for p in plans)
    engine = Engine(demo_backend, max_batch=4)
    async with trio.open_nursery() as n:
        for text in ("three", "four", "five"):
            n.start_soon(run, engine, req(text))
    assert any(p.batch for p in plans[lone:])
    assert len(ended) == len(set(map(id, ended))) == 5


async def test_a_lone_request_queues_no_pass_past_its_cap(demo_backend, monkeypatch):
    """A request that ends at ``max_tokens`` runs one forward pass per token it writes: its last token is read
    with nothing queued after it (``Take``), as mlx-lm's ``generate_step`` stops at ``max_tokens``."""
    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Finished

    plans = []
    real_plan = Scheduler.plan
    monkeypatch.setattr(Scheduler, "plan", lambda self, w: plans.append(real_plan(self, w)) or plans[-1])
    r = ChatRequest(model="tinytitan-demo", messages=(Message("user", "Count to a hundred."),), max_tokens=7,
                    temperature=0, reasoning=False, speculative=False)
    async with Engine(demo_backend, max_batch=1).session(r) as events:
        finished = [ev async for ev in events if isinstance(ev, Finished)][0]
    steps = [s for p in plans for s in p.alone]
    passes = [s for s in steps if isinstance(s, (Sample, Next))]
    assert finished.usage.completion_tokens == 7 and finished.reason == "length"
    assert len(passes) == 7 and isinstance(steps[-1], Take)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("rows", [1, 3])
async def test_a_first_token_is_read_before_the_next_pass_is_queued(demo_backend, monkeypatch, rows, device):
    """Where the passes run on the host (mlx on a CPU), every first sample is read at once (``Sample`` with
    ``now``), alone or in a burst's batch: the first token's text is handed to its consumer before the row's
    next pass is queued (queuing a pass runs most of it there: the first token would otherwise wait for that
    pass). The pass after it is queued unread, and decoding is pipelined from then on: a first sample, a sample
    of that token, then ``Next`` steps. On a GPU the first sample is pipelined as mlx-lm's: read once the next
    pass is queued."""
    import trio

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine import session
    from tinytitan.engine.decode import batch, step
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.engine import Engine
    from tinytitan.events import TextDelta

    trail: list = []  # on the model thread, in order: plans, forward passes queued, first texts handed over
    real_plan, real_sample, real_batch, real_emit = Scheduler.plan, step._sample, batch.Batch.step, session.Mailbox.emit
    texted: set = set()

    def emit(box, ev):
        if isinstance(ev, TextDelta) and id(box) not in texted:
            texted.add(id(box))
            trail.append("text")
        return real_emit(box, ev)

    monkeypatch.setattr(Scheduler, "plan", lambda self, w: trail.append(real_plan(self, w)) or trail[-1])
    monkeypatch.setattr(step, "_sample", lambda *a: trail.append("pass") or real_sample(*a))
    monkeypatch.setattr(batch.Batch, "step", lambda *a: trail.append("pass") or real_batch(*a))
    monkeypatch.setattr(session.Mailbox, "emit", emit)
    arrive_together(monkeypatch, rows)
    forward_on_host(monkeypatch, device == "cpu")
    engine = Engine(demo_backend, max_batch=4)

    async def run(i):
        r = ChatRequest(model="tinytitan-demo", messages=(Message("user", f"Count to a hundred, {i}."),),
                        max_tokens=8, temperature=0, reasoning=False, speculative=False)
        async with engine.session(r) as events:
            async for _ in events:
                pass

    async with trio.open_nursery() as n:
        for i in range(rows):
            n.start_soon(run, i)
    plans = [i for i, p in enumerate(trail) if isinstance(p, step.Plan) and (p.alone or p.batch)
             and not any(isinstance(s, step.Prefill) for s in (*p.alone, *p.batch))]
    shapes = [[type(s).__name__ + ("!" if getattr(s, "now", False) else "") for s in (*trail[i].alone, *trail[i].batch)]
              for i in plans[:3]]
    if device == "gpu":  # pipelined: the first texts come once the next pass is queued
        assert shapes == [["Sample"] * rows, ["Next"] * rows, ["Next"] * rows], shapes
        assert trail[plans[0] + 1:plans[1]] == ["pass"], trail[plans[0]:plans[1] + 1]
        assert trail[plans[1] + 1:plans[2]] == ["pass"] + ["text"] * rows, trail[plans[1]:plans[2] + 1]
        return
    assert shapes == [["Sample!"] * rows, ["Sample"] * rows, ["Next"] * rows], shapes
    # between the first samples' plan and the next: one pass (theirs), then every row's first text
    assert trail[plans[0] + 1:plans[1]] == ["pass"] + ["text"] * rows, trail[plans[0]:plans[1] + 1]


@pytest.mark.parametrize("drafts", [False, True])
async def test_a_row_with_a_grammar_and_no_drafts_reads_its_first_token_pipelined(demo_backend, monkeypatch, drafts):
    """On a CPU too, a row whose grammar may force a run after its first token, and that does not draft, reads
    that token pipelined: its forced run is proposed with it (read at once, the run would wait a pass). A row
    that drafts reads it at once: the run comes to it as a draft. Either way the document is the same."""
    from tinytitan.chat_request import ChatRequest, Grammar, Message
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Finished

    plans = []
    real_plan = Scheduler.plan
    monkeypatch.setattr(Scheduler, "plan", lambda self, w: plans.append(real_plan(self, w)) or plans[-1])
    forward_on_host(monkeypatch, True)
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    r = ChatRequest(model="tinytitan-demo", messages=(Message("user", "A record."),), max_tokens=40, temperature=0,
                    reasoning=False, speculative=drafts, grammar=Grammar("json_schema", schema))
    async with Engine(demo_backend, max_batch=1).session(r) as events:
        finished = [ev async for ev in events if isinstance(ev, Finished)][0]
    first = next(s for p in plans for s in p.alone if isinstance(s, Sample))
    assert first.now is drafts
    fed = [s for p in plans for s in p.alone if isinstance(s, Verify if drafts else Sample) and
           (drafts or s.forced)]
    assert fed and finished.usage.completion_tokens > 2  # the grammar's runs fed whole: forced, or as drafts


async def test_a_batch_whose_rows_end_at_their_cap_queues_no_pass_past_it(demo_backend, monkeypatch):
    """Batch rows reading the last token their cap allows read it with nothing queued for them (``Take``, a hole
    in the batch's pass); where every row ends there, no pass runs at all: three requests of seven tokens sent
    together run seven batched passes, not eight."""
    import trio

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Finished

    plans = []
    real_plan = Scheduler.plan
    monkeypatch.setattr(Scheduler, "plan", lambda self, w: plans.append(real_plan(self, w)) or plans[-1])
    arrive_together(monkeypatch, 3)
    engine = Engine(demo_backend, max_batch=4)
    ends = []

    async def one(text):
        r = ChatRequest(model="tinytitan-demo", messages=(Message("user", text),), max_tokens=7, temperature=0,
                        reasoning=False, speculative=False)
        async with engine.session(r) as events:
            ends.extend([ev async for ev in events if isinstance(ev, Finished)])

    async with trio.open_nursery() as n:
        for text in ("Count to a hundred.", "Name the planets.", "Spell a word."):
            n.start_soon(one, text)
    assert [(f.reason, f.usage.completion_tokens) for f in ends] == [("length", 7)] * 3
    batched = [p.batch for p in plans if p.batch]
    passes = [b for b in batched if any(isinstance(s, (Sample, Next)) for s in b)]
    assert all(isinstance(s, Take) for s in batched[-1]) and len(batched[-1]) == 3
    assert len(passes) == 7, [[type(s).__name__ for s in b] for b in batched]


async def test_a_lone_row_reads_a_short_prompt_whole_and_a_long_one_first_in_a_short_chunk(demo_backend,
                                                                                             monkeypatch):
    """Where others may join (a batching engine), a lone row whose prompt is long reads a short first chunk, so
    requests sent with it are read beside it from the next step; a short prompt is read in one chunk (one more
    forward pass would cost it more than a joiner waits)."""
    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode import decoder, scheduler
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.engine import Engine

    plans = []
    real_plan = Scheduler.plan
    monkeypatch.setattr(Scheduler, "plan", lambda self, w: plans.append(real_plan(self, w)) or plans[-1])
    monkeypatch.setattr(scheduler, "SPLIT_ABOVE", 80)
    monkeypatch.setattr(decoder, "FIRST_CHUNK", 16)

    async def chunks(text: str) -> tuple[int, list[int]]:
        plans.clear()
        demo_backend.prompt_cache.clear()
        r = ChatRequest(model="tinytitan-demo", messages=(Message("user", text),), max_tokens=2, temperature=0,
                        reasoning=False, speculative=False)
        async with Engine(demo_backend, max_batch=4).session(r) as events:
            [ev async for ev in events]
        prompt = len(demo_backend.prepare(r).tokens)
        return prompt, [len(s.tokens) for p in plans for s in p.alone if isinstance(s, Prefill)]

    prompt, read = await chunks("Hi, a short one.")
    assert 16 < prompt - 1 <= 80 and read == [prompt - 1]  # whole, in one chunk (its last token read with its sample)
    prompt, read = await chunks("Please read all of this. " * 20)
    assert prompt - 1 > 80 and read == [16, prompt - 1 - 16]


async def test_rows_decoding_together_feed_and_read_their_samples_as_one_array(demo_backend, monkeypatch):
    """Greedy rows decoding side by side in the batch feed the last pass's samples as they came out of it (one
    [rows] array, not a stack of per-row slices) and read them in one read a step, not one read a row: on a fast
    device a step's per-row work on the host is what a batch pays for. The tokens are what they are alone."""
    import trio

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.decode import batch as batch_mod
    from tinytitan.engine.decode.lane import Lane
    from tinytitan.engine.engine import Engine
    from tinytitan.events import TextDelta

    reads, fed_whole = [], []
    real_take, real_inputs = Lane.take, batch_mod.Batch._inputs
    monkeypatch.setattr(Lane, "take", lambda self: reads.append(1) or real_take(self))

    def inputs(feeds, width, last):
        got = real_inputs(feeds, width, last)
        fed_whole.append(last is not None and got.shape == (len(feeds), 1) and len(feeds) > 1
                         and not any(got is f for f in feeds) and len(feeds) == len(last[1]))
        return got

    monkeypatch.setattr(batch_mod.Batch, "_inputs", staticmethod(inputs))
    texts = ("Count to a hundred.", "Name the planets.", "Spell a word.")

    def request(text):
        return ChatRequest(model="tinytitan-demo", messages=(Message("user", text),), max_tokens=24, temperature=0,
                           reasoning=False, speculative=False)

    async def text_of(engine, text, into):
        async with engine.session(request(text)) as events:
            into[text] = "".join([ev.text async for ev in events if isinstance(ev, TextDelta)])

    alone: dict = {}
    for text in texts:
        demo_backend.prompt_cache.clear()
        await text_of(Engine(demo_backend, max_batch=1), text, alone)
    demo_backend.prompt_cache.clear()
    reads.clear()
    arrive_together(monkeypatch, 3)
    together: dict = {}
    async with trio.open_nursery() as n:
        engine = Engine(demo_backend, max_batch=4)
        for text in texts:
            n.start_soon(text_of, engine, text, together)
    assert together == alone
    assert sum(fed_whole) >= 20, fed_whole  # every pass once the three decode side by side (24 in all)
    assert len(reads) <= 3, len(reads)  # a row reads on its own only a pending token that is its own


async def test_a_row_that_fails_in_a_step_reads_none_of_the_tokens_that_step_gave_it(demo_tok, monkeypatch):
    """A forward may report a row both failed and sampled (its hand-out failed after a token): the fold ends the
    row failed and hands it no token of that step, so nothing reaches its client after the failure."""
    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptedForward, ScriptEntry
    from tinytitan.engine.decode.rows import Row
    from tinytitan.engine.engine import Engine
    from tinytitan.events import TextDelta

    steps, ended = [], []
    real_run, real_end = ScriptedForward.run, Row.end

    def run(self, plan, rows):
        out = real_run(self, plan, rows)
        steps.append(dict(out.tokens))
        if len(steps) == 4:
            for row_id in out.tokens:
                out.failed[row_id] = RuntimeError("the forward failed this row after sampling")
        return out

    monkeypatch.setattr(ScriptedForward, "run", run)
    monkeypatch.setattr(Row, "end", lambda row, kv=None, like=None: ended.append(
        (row.ending.kind, list(row.generated))) or real_end(row, kv, like))
    backend = ScriptedBackend([ScriptEntry("one two three four five six seven eight")], demo_tok)
    r = ChatRequest(model=backend.model_id, messages=(Message("user", "Count."),), max_tokens=20, reasoning=False)
    text = []
    async with Engine(backend).session(r) as events:
        async for ev in events:
            if isinstance(ev, TextDelta):
                text.append(ev.text)
    before = [t for step in steps[:3] for ts in step.values() for t in ts]
    assert steps[3], steps  # the failing step did sample a token for the row
    assert ended == [("failed", before)]
    assert demo_tok.decode(before).startswith("".join(text))


def test_a_scripted_pass_that_reads_two_tokens_and_fails_on_the_second_hands_out_the_first_once(demo_tok):
    """``Next`` with ``hold``: the pending token, then the pass queued after it read at once. Where the second
    is the script's failure, the forward reports the row failed with its one token, not that token twice."""
    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptedForward, ScriptEntry, ScriptRun

    backend = ScriptedBackend([ScriptEntry("Hi", error="the script fails here")], demo_tok)
    prepared = backend.prepare(ChatRequest(model=backend.model_id, messages=(Message("user", "x"),), reasoning=False))
    ids = demo_tok.encode("Hi", add_special_tokens=False)
    run = ScriptRun(backend, backend.entries[0], ids, prepared)
    run.at = len(ids) - 1
    run.pending = run.sample()  # the script's last token, sampled by the step before
    forward = ScriptedForward(backend, 1)
    forward.own(7, run)
    out = forward.run(Plan(alone=(Next(7, hold=True),)), {})
    assert out.tokens[7] == (ids[-1],)
    assert "the script fails here" in str(out.failed[7])
