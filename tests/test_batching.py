"""Continuous batching on the demo model: each member decodes exactly what it decodes alone (greedy, and
seeded sampling), whatever the others do — different stop strings, caps, reasoning levels and tool calls, a
member joining late, a member cancelled or failing mid-batch — and no place is ever leaked."""

from __future__ import annotations

import dataclasses
import random

import httpx
import pytest
import trio

from tinytitan.chat_request import ChatRequest, Tool
from tinytitan.engine.engine import Engine
from tinytitan.events import Failed, Finished, Started, ToolCallStarted
from batching_helpers import FORCE, RECORDS, THINK, alone_and_together, req, run, summary, together
from batching_helpers import demo  # noqa: F401  (the fixture)

WEATHER = Tool("get_weather", "Weather for a city",
               {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def stream_generated(backend, r: ChatRequest) -> list:
    """The events of ``r`` decoded token by token with mlx-lm's own ``stream_generate`` (its sampler, the
    request's logits processors, the process-wide random key seeded as a lone request seeds it): the
    reference a request decoded by the step must match."""
    import mlx.core as mx
    from mlx_lm import stream_generate

    from tinytitan.engine.decode.token_events import DecodeLoop

    prepared = backend.prepare(r)
    events: list = []
    loop = DecodeLoop(backend.parser(prepared), r.stop, events.append, prepared.sampling)
    sampler, processors = backend.sampler_for(prepared, loop)
    if r.seed is not None:
        mx.random.seed(int(r.seed) % 2**64)
    loop.start(len(prepared.tokens))
    hit_length = False
    for resp in stream_generate(backend.model, backend.tokenizer, mx.array(prepared.tokens),
                                max_tokens=prepared.max_tokens, sampler=sampler, logits_processors=processors):
        if resp.finish_reason == "stop":
            if resp.text:
                loop.parser_text(resp.text)
            break
        if not loop.token(resp.text):
            break
        hit_length = resp.finish_reason == "length"
    loop.end(hit_length)
    return events


async def test_members_decode_what_they_decode_alone(demo):
    engine = Engine(demo, max_batch=4)
    probe = summary(await run(engine, req("Write a haiku about the sea.", max_tokens=40)))
    text = "".join(getattr(ev, "text", "") for ev in probe)
    stop = text[12:16]
    requests = [
        req("Write a haiku about the sea.", max_tokens=40, stop=(stop,)),   # a stop string mid-answer
        req("List three prime numbers.", max_tokens=5),                     # a small cap
        req(THINK, max_tokens=33, reasoning="high"),                        # thinking on
        req(FORCE, max_tokens=60, tools=(WEATHER,)),                        # a tool call
    ]
    alone, together = await alone_and_together(engine, requests)
    assert together == alone
    finishes = [ev[-1] for ev in alone]
    assert [f.reason for f in finishes] == ["stop_sequence", "length", "stop", "tool_calls"]
    assert finishes[2].usage.reasoning_tokens > 0 and finishes[1].usage.completion_tokens == 5
    assert any(isinstance(ev, ToolCallStarted) and ev.name == "get_weather" for ev in alone[3])
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)


async def test_seeded_sampling_in_a_batch_draws_what_it_draws_alone(demo):
    sampled = [req(f"Tell me a story about {w}.", temperature=0.9, seed=s, max_tokens=24)
               for w, s in (("a cat", 7), ("a dog", 8), ("a bird", 7))]
    alone, together = await alone_and_together(Engine(demo, max_batch=3), sampled)
    assert together == alone
    # and the batch's seeded sampler draws exactly what one request alone draws with mlx-lm's own sampler
    solo = [summary(await run(Engine(demo, max_batch=1), r)) for r in sampled]
    assert solo == alone


async def test_a_logit_bias_in_a_batch_draws_what_it_draws_alone(demo):
    token = demo.tokenizer.encode(" the", add_special_tokens=False)[0]
    rows = [req("Tell me a story.", temperature=0.9, seed=5, max_tokens=16, logit_bias=((token, 6.0),)),
            req("Name a colour.", max_tokens=16, logit_bias=((token, 100.0),)), req("Describe a forest.", max_tokens=16)]
    alone, together = await alone_and_together(Engine(demo, max_batch=3), rows)
    assert together == alone
    unbiased = summary(await run(Engine(demo, max_batch=1), dataclasses.replace(rows[0], logit_bias=())))
    assert unbiased != alone[0]  # the bias changed the draw


async def test_a_member_joining_late_and_one_cancelled_leave_the_others_untouched(demo):
    engine = Engine(demo, max_batch=4)
    long_a, long_b = req("Explain recursion.", max_tokens=60), req("Describe a forest.", max_tokens=60)
    late, cancelled = req("Name a colour.", max_tokens=20), req("Count to a hundred.", max_tokens=2000)
    expected = {name: summary(await run(engine, r))
                for name, r in (("a", long_a), ("b", long_b), ("late", late))}
    got: dict = {}
    async with trio.open_nursery() as n:
        async def one(name, r, stop_after=None):
            got[name] = await run(engine, r, stop_after)

        n.start_soon(one, "a", long_a)
        n.start_soon(one, "b", long_b)
        n.start_soon(one, "cancelled", cancelled, 2)  # hangs up after its first delta
        while engine.running < 3 and "cancelled" not in got:  # it may have come and gone between two looks
            await trio.sleep(0.005)
        await trio.sleep(0.05)  # the others are decoding by now
        n.start_soon(one, "late", late)
    assert {k: summary(v) for k, v in got.items() if k != "cancelled"} == expected
    assert [type(ev).__name__ for ev in got["cancelled"]] == ["Started", "TextDelta"]
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)


@pytest.mark.parametrize("cached", [True, False])
async def test_members_joining_while_others_decode_read_their_first_token_at_once(demo, monkeypatch, cached):
    """A prompt arriving while others decode is read on its own cache, its last chunk (or, cached but its last
    token, that token) with its first sample in one step, the sample read at once: its first token is out
    at the end of that step, and it joins the batch with it. Whatever ends it there (a one-token cap, a stop
    string in its first token) or goes on from there (a forced tool call, seeded sampling, a thought) gives
    exactly what it gives alone."""
    from tinytitan.engine.decode import scheduler
    from tinytitan.engine.decode.plan import Sample

    engine = Engine(demo, max_batch=8)
    first = summary(await run(engine, req("Name a colour.", max_tokens=3)))
    first_text = next(ev.text for ev in first if hasattr(ev, "text"))
    joiners = {
        "cap1": req("Name a colour.", max_tokens=1),
        "stop": req("Name a colour.", max_tokens=3, stop=(first_text[:1],)),
        "tool": req(FORCE, max_tokens=60, tools=(WEATHER,)),
        "seeded": req("Tell me a story about a cat.", temperature=0.9, seed=5, max_tokens=12),
        "think": req(THINK, max_tokens=33, reasoning="high"),
    }
    expected = {k: summary(await run(engine, r)) for k, r in joiners.items()}
    if not cached:
        demo.prompt_cache.clear()  # the joiners' prompts are read whole while the other decodes
    first_steps: dict[int, object] = {}
    real = scheduler.Scheduler.fold

    def fold(self, plan, result):
        for s in (*plan.alone, *plan.batch):
            if s.row in self.rows and not self.rows[s.row].generated:
                first_steps.setdefault(s.row, (s, s in plan.alone, len(self.rows[s.row].tokens)))
        return real(self, plan, result)

    monkeypatch.setattr(scheduler.Scheduler, "fold", fold)
    got: dict = {}
    async with trio.open_nursery() as outer:
        async def one(name, r):
            got[name] = await run(engine, r)

        outer.start_soon(one, "long", req("Explain recursion.", max_tokens=100_000))  # decodes until cancelled
        while engine.running < 1:
            await trio.sleep(0.005)
        await trio.sleep(0.05)  # decoding by now
        first_steps.clear()
        async with trio.open_nursery() as n:
            for name, r in joiners.items():
                n.start_soon(one, name, r)
                await trio.sleep(0.02)
        outer.cancel_scope.cancel()  # the joiners are done: the long one hangs up
    assert {k: summary(v) for k, v in got.items() if k != "long"} == expected
    # each joiner's first step: its prompt's rest and first sample alone, read at once (read whole where uncached)
    whole = [len(s.tokens) for s, _, _ in first_steps.values() if len(s.tokens) > 1]
    assert (not whole) if cached else len(whole) >= 3, whole
    assert len(first_steps) == len(joiners)
    for s, alone, prompt in first_steps.values():
        assert alone and isinstance(s, Sample) and s.now and not s.forced
        assert (len(s.tokens) == 1) if cached else (1 <= len(s.tokens) <= prompt), (len(s.tokens), prompt)
    assert expected["cap1"][-1].reason == "length" and expected["cap1"][-1].usage.completion_tokens == 1
    assert expected["stop"][-1].reason == "stop_sequence"
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 8)


@pytest.mark.parametrize("where", ["before its prompt", "mid-prompt", "mid-answer"])
async def test_a_lone_member_joins_the_batch_where_it_stands(demo, monkeypatch, where):
    """A member alone decodes outside the batch; when another arrives it joins the batch where it stands —
    once its prompt is read but the last token (it reads the rest on its own cache; the batch reads that token
    with its first sample), or
    between two tokens of its answer, its sampled token still unread — and decodes on exactly as it would have
    alone: a forced tool call (its logits processor's state), seeded sampling (its sampler's key), a thought,
    a grammar's forced runs (fed in one pass in the batch)."""
    from tinytitan.engine.decode import batch, decoder, step

    engine = Engine(demo, max_batch=4)
    requests = [req(FORCE, max_tokens=60, tools=(WEATHER,)),
                req("Tell me a story about a cat, a dog and a bird in a forest.", temperature=0.9, seed=3,
                    max_tokens=60),
                req(THINK, max_tokens=60, reasoning="high"),
                req("List two records.", max_tokens=150, grammar=RECORDS),  # forced runs of its grammar
                req("List two records, please.", max_tokens=150, grammar=RECORDS, temperature=0.9, seed=4)]
    expected = [summary(await run(engine, r)) for r in requests]
    monkeypatch.setattr(decoder, "PREFILL_STEP", 16)
    monkeypatch.setattr(decoder, "FIRST_CHUNK", 16)
    handovers, looks = [], {}

    def joined_at(self, scheduler, later):  # as if someone arrived at that look
        [row] = scheduler.rows.values()
        looks[row] = looks.get(row, 0) + 1
        if where == "mid-answer":  # from the first look with two tokens read and a third sampled, not read yet
            if looks.get((row, "joined")) is None and len(row.generated) >= 2 and row.pending and not row.run:
                looks[row, "joined"] = looks[row]
            return looks.get((row, "joined")) is not None
        return looks[row] >= {"before its prompt": 1, "mid-prompt": 2}[where]  # one look before each chunk

    real_add = batch.Batch.add

    def add(self, row_ids, caches):
        [row_id] = row_ids
        lane = engine_lanes(self)[row_id]
        handovers.append((len(lane.row.generated), lane.pending is not None,
                          lane.read >= len(lane.row.tokens) - 1))
        return real_add(self, row_ids, caches)

    def engine_lanes(b):
        return next(f.lanes for f in step_forwards if f.batch is b)

    step_forwards = []
    real_forward = step.Forward.__init__
    monkeypatch.setattr(step.Forward, "__init__", lambda self, *a: step_forwards.append(self) or real_forward(self, *a))
    monkeypatch.setattr(decoder.Decoder, "_next_joins", joined_at)
    monkeypatch.setattr(batch.Batch, "add", add)
    got = []
    for r in requests:
        demo.prompt_cache.clear()  # every prompt read from its start
        got.append(summary(await run(engine, r)))
    assert got == expected
    assert len(handovers) == len(requests) and all(read for _, _, read in handovers)  # its prompt read first
    if where == "mid-answer":  # between two tokens, one sampled and not read yet: no step back, none drawn again
        assert all(generated >= 2 and pending for generated, pending, _ in handovers)
    else:  # its prompt read but the last token, which the batch reads with its first sample
        assert all(generated == 0 and not pending for generated, pending, _ in handovers)
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)


async def test_a_lone_member_decodes_on_alone_when_one_of_another_model_arrives(demo, monkeypatch):
    """One of another model waits until the batch has drained, so a lone member does not join the batch for
    it (it would decode on there, a batch of one, for nothing): it decodes on alone, and each decodes what it
    decodes alone."""
    import time

    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.decode import batch, decoder
    from tinytitan.engine.backends.mlx import MLXBackend

    other = MLXBackend(ensure_demo_model(), "tinytitan-demo-other", lazy=True)
    engine = Engine([demo, other], max_batch=4)
    first = req("Explain recursion.", max_tokens=60)
    second = req("Name a colour.", max_tokens=20).with_(model=other.model_id)
    try:
        expected = [summary(await run(engine, r)) for r in (first, second)]
        inserted, looks = [], []
        real = decoder.Decoder._next_joins

        def once_the_other_is_in(self, scheduler, later):
            looks.append(1)
            if scheduler.backend is demo and len(looks) == 2:  # at its second look, the other has arrived
                deadline = time.monotonic() + 30
                while not (self.waiting or later) and time.monotonic() < deadline:
                    time.sleep(0.002)
            return real(self, scheduler, later)

        real_add = batch.Batch.add
        monkeypatch.setattr(decoder.Decoder, "_next_joins", once_the_other_is_in)
        monkeypatch.setattr(batch.Batch, "add", lambda self, ids, caches: inserted.extend(ids) or real_add(self, ids, caches))
        got: dict = {}
        async with trio.open_nursery() as n:
            async def one(i, r):
                got[i] = summary(await run(engine, r))

            n.start_soon(one, 0, first)
            while engine.running < 1:
                await trio.sleep(0.005)
            n.start_soon(one, 1, second)
        assert [got[0], got[1]] == expected
        assert inserted == []  # both decoded alone to their end, neither joined a batch
        assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)
    finally:
        demo.ensure_loaded()  # the session's demo model, unloaded for the other one


async def test_a_waiting_member_of_another_model_whose_client_left_is_let_go_unopened(demo, monkeypatch):
    """One of another model waits for the batch to drain; its client leaves meanwhile: when its turn comes it
    ends as left, never opened — its model is not loaded for it — and every place comes back."""
    import time

    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.decode import decoder, rows, scheduler

    other = MLXBackend(ensure_demo_model(), "tinytitan-demo-other", lazy=True)
    engine = Engine([demo, other], max_batch=4)
    submitted, let_go = [], []
    real_submit, real_accept, real_let_go = decoder.Decoder.submit, rows.Row.accept, scheduler.Scheduler.let_go

    deadline = time.monotonic() + 30

    def accept(row, token):  # the first member decodes on only once the other has come and its client has left
        while row is submitted[0] and not (len(submitted) == 2 and submitted[1].stopped):
            assert time.monotonic() < deadline, "the other's client never left"
            time.sleep(0.002)
        return real_accept(row, token)

    monkeypatch.setattr(decoder.Decoder, "submit", lambda self, row: submitted.append(row) or real_submit(self, row))
    monkeypatch.setattr(rows.Row, "accept", accept)
    monkeypatch.setattr(scheduler.Scheduler, "let_go", lambda self, row: let_go.append(row) or real_let_go(self, row))
    leaving = trio.CancelScope()

    async def leaves():
        with leaving:
            await run(engine, req("Name a colour.").with_(model=other.model_id))

    async def until_submitted(n):
        with trio.fail_after(30):
            while len(submitted) < n:
                await trio.sleep(0.005)

    try:
        async with trio.open_nursery() as n:
            n.start_soon(run, engine, req("Explain recursion.", max_tokens=12))
            await until_submitted(1)
            n.start_soon(leaves)
            await until_submitted(2)
            leaving.cancel()
        assert let_go == submitted[1:] and submitted[1].ending is rows.LEFT
        assert not other.loaded
        assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)
    finally:
        demo.ensure_loaded()  # (the session's demo model, should the other have been loaded after all)


async def test_a_load_that_exits_fails_its_request_and_the_engine_serves_on(demo, monkeypatch):
    """A model whose load raised what is not an Exception (SystemExit: a group's refusal of a model it cannot
    split once did) broke the decode loop while its row was being taken in, in no list: nobody ended it, and its
    client waited for ever. It fails as an error of its own (never an exit for its consumer to raise), and the
    next request is served."""
    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend

    other = MLXBackend(ensure_demo_model(), "tinytitan-demo-other", lazy=True)

    def exits():
        raise SystemExit("cannot serve it here")

    monkeypatch.setattr(other, "ensure_loaded", exits)
    engine = Engine([demo, other], max_batch=4)
    try:
        with trio.fail_after(60):
            with pytest.raises(RuntimeError, match="cannot serve it here"):
                await run(engine, req("Name a colour.").with_(model=other.model_id))
            assert summary(await run(engine, req("Explain recursion.", max_tokens=8)))
        assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)
    finally:
        demo.ensure_loaded()  # (the session's demo model, unloaded for the other one)


async def test_a_merge_into_the_batch_that_fails_ends_its_rows_and_the_engine_serves_on(demo, monkeypatch):
    """The merge of joining rows into the batch raises (out of memory, say): those rows and the batch's fail
    with it, each ending its stream, every place comes back, and the next requests are served."""
    from tinytitan.engine.decode import batch

    real, calls = batch.Batch.add, []

    def add(self, row_ids, caches):
        calls.append(list(row_ids))
        if len(calls) == 1:
            raise MemoryError("the merge could not be allocated")
        return real(self, row_ids, caches)

    monkeypatch.setattr(batch.Batch, "add", add)
    engine = Engine(demo, max_batch=2)
    with trio.fail_after(60):
        got = await together(engine, {i: req(text, max_tokens=8)
                                      for i, text in enumerate(("Explain recursion.", "Describe a forest."))})
    assert calls and all(isinstance(got[i][-1], (Failed, Finished)) for i in got)
    assert any(isinstance(got[i][-1], Failed) for i in got)
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 2)
    with trio.fail_after(60):
        again = await run(engine, req("Name a colour.", max_tokens=4))
    assert isinstance(again[-1], Finished)


async def test_a_row_whose_cache_cannot_be_taken_out_of_the_batch_fails_alone(demo, monkeypatch):
    """Taking an ended row's cache out of the batch raises: that row's cache is not kept, and the rows decoding
    beside it go on to their ends (a row's own failure is never the step's)."""
    from tinytitan.engine.decode import ragged

    real, calls = ragged.RaggedKVCache.extract, []

    def extract(self, idx):
        calls.append(idx)
        if len(calls) == 1:
            raise MemoryError("the row's cache could not be copied out")
        return real(self, idx)

    monkeypatch.setattr(ragged.RaggedKVCache, "extract", extract)
    engine = Engine(demo, max_batch=3)
    reqs = {"short": req("Name a colour.", max_tokens=3), "a": req("Explain recursion.", max_tokens=30),
            "b": req("Describe a forest.", max_tokens=30)}
    with trio.fail_after(60):
        got = await together(engine, reqs)
    assert calls
    assert isinstance(got["a"][-1], Finished) and isinstance(got["b"][-1], Finished)
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 3)


async def test_a_lone_constrained_request_reads_forced_runs_in_one_pass(demo, monkeypatch):
    """Alone, a request's grammar-forced tokens (keys, punctuation) are read in one forward pass a run, and it
    decodes exactly what mlx-lm's own token-by-token decoding gives it (``stream_generate`` with the same
    sampler and mask), greedy and seeded — also with --max-batch 1 (mlx-lm's process-wide random key)."""
    from tinytitan.engine.decode.rows import Row

    runs = []
    real = Row.propose
    monkeypatch.setattr(Row, "propose", lambda row: runs.append(real(row)) or runs[-1])
    requests = [req("List the records.", max_tokens=120, grammar=RECORDS),
                req("List the records, please.", max_tokens=120, grammar=RECORDS, temperature=0.9, seed=11)]
    alone = [summary(await run(Engine(demo, max_batch=4), r)) for r in requests]
    forced = sum(len(r) for r in runs)
    one_at_a_time = [summary(await run(Engine(demo, max_batch=1), r)) for r in requests]
    token_by_token = [summary(stream_generated(demo, r)) for r in requests]
    assert alone == one_at_a_time == token_by_token
    assert sum(1 for r in runs if r) >= 6 and forced >= 40  # '{"name":"' and '","count":' each time


async def test_a_break_of_the_loop_while_a_member_decodes_alone_ends_it_too(demo, monkeypatch):
    """Something that is not an Exception breaking the batch loop while a lone member decodes outside the
    batch (it is in neither the batch nor the waiting list) still ends that member and frees its place."""
    from tinytitan.engine.decode import step

    def broken(*_a):
        raise KeyboardInterrupt("the loop broke")

    monkeypatch.setattr(step.Forward, "run", broken)
    engine = Engine(demo, max_batch=4)
    with trio.fail_after(10):
        try:
            events = await run(engine, req("Hello.", max_tokens=5))
        except KeyboardInterrupt:
            events = None
    assert events is None or isinstance(events[-1], Failed)
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)


async def test_a_failing_member_fails_alone(demo):
    engine = Engine(demo, max_batch=3)
    fine = [req("Say something kind.", max_tokens=30), req("Say something wise.", max_tokens=30)]
    expected = [summary(await run(engine, r)) for r in fine]
    got = await together(engine, dict(enumerate(fine + [req("FAIL after a few tokens", max_tokens=30)])))
    assert [summary(got[0]), summary(got[1])] == expected
    assert isinstance(got[2][-1], Failed) and "this member's processor broke" in got[2][-1].message
    assert isinstance(got[2][0], Started)


async def test_what_a_member_leaves_in_the_prompt_cache_serves_any_thread(demo):
    """A member's KV leaves the batch as a slice of the batch's cache: it is stored evaluated, so a decode on
    another thread (here: this one, with mlx-lm's stream_generate) reuses it and decodes the same tokens."""
    from tinytitan.engine.decode.token_events import DecodeLoop

    r = req("Hello there, how are you?", max_tokens=6)
    batched = await run(Engine(demo, max_batch=2), r)
    prepared = demo.prepare(r)
    alone: list = []
    demo.decode(prepared, DecodeLoop(demo.parser(prepared), (), alone.append, prepared.sampling), lambda: False)
    assert alone[0].cached_tokens == len(prepared.tokens) - 1
    assert summary(alone) == summary(batched)


PATHS = {"openai_chat": "/v1/chat/completions", "openai_responses": "/v1/responses",
         "anthropic_messages": "/v1/messages"}


def body(protocol: str, i: int) -> dict:
    text = f"Request {i}: say something."
    if protocol == "openai_responses":
        return {"model": "tinytitan-demo", "input": text, "stream": True, "max_output_tokens": 40}
    return {"model": "tinytitan-demo", "messages": [{"role": "user", "content": text}], "stream": True,
            "max_tokens": 40}


async def test_random_hangups_across_the_three_protocols_leak_no_place(serve, demo_backend, monkeypatch):
    """Whatever ends a generation (its end, a hang-up before or during its prompt or answer), it ends at one
    place, once: ``Row.end``."""
    from tinytitan.engine.decode.decoder import Decoder
    from tinytitan.engine.decode.rows import Row

    submitted: list = []
    ended: list = []
    real_end, real_submit = Row.end, Decoder.submit
    monkeypatch.setattr(Row, "end", lambda row, kv=None, like=None: ended.append(row) or real_end(row, kv, like))
    monkeypatch.setattr(Decoder, "submit", lambda self, row: submitted.append(row) or real_submit(self, row))
    s = await serve(backend=demo_backend, max_queue=64)
    assert s.engine.max_batch > 1
    rng = random.Random(9)
    headers = {"anthropic-version": "2023-06-01"}

    async def client(c: httpx.AsyncClient, i: int):
        protocol = rng.choice(sorted(PATHS))
        chunks = rng.choice([0, 0, 1, 2, 5, 20])
        try:
            async with c.stream("POST", s.url(PATHS[protocol]), json=body(protocol, i), headers=headers) as r:
                assert r.status_code == 200
                n = 0
                async for _ in r.aiter_raw():
                    n += 1
                    if n >= chunks:
                        break  # hang up
        except httpx.HTTPError:
            pass

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=12)) as c:
        for start in range(0, 200, 10):
            async with trio.open_nursery() as n:
                for i in range(start, start + 10):
                    n.start_soon(client, c, i)
        with trio.fail_after(20):
            while s.engine.running or s.engine.waiting:
                await trio.sleep(0.02)
        health = (await c.get(s.url("/health"))).json()
        assert (health["running"], health["waiting"], health["max_batch"]) == (0, 0, s.engine.max_batch)
        assert s.engine.admission.slots.value == s.engine.max_batch
        # every generation that reached the decoder ended, each once, and let go of its session
        assert len(ended) == len(set(map(id, ended))) == len(submitted) > 0
        assert {id(r) for r in ended} == {id(r) for r in submitted} and all(r.box.let_go for r in ended)
        r = await c.post(s.url("/v1/chat/completions"), json={**body("openai_chat", 0), "stream": False})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
