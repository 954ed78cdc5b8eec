"""The decode step's scheduler: which rows are admitted, what each step reads for each (a plan), the fold of its
result, and where rows end. The decode loop (decoder.py) runs it on the model thread; so does ``decode_one`` for
one request on its own.

Rules:
- Every prompt is read on its row's own KV cache, in chunks (``Prefill``), all but its last token; that token
  is read with the first sample (``Sample``) — alone, or in the batch, which the row joins then where others
  wait (a burst: its first token comes back from that very pass). While others decode, a chunk is
  ``PREFILL_STEP_SHARED`` tokens, so each of their tokens waits at most that long, and a newcomer's last
  chunk (or its last token alone, the rest cached) is read with its first sample in the same step, on its
  own cache, the sample read at once (``Sample`` with ``now``): its first token is out at the end of that
  step — one pass of its own, one token, where sampling it in the batch's next pass and reading it pipelined
  took two more batch steps (a short request beside three long streams: first token 166 ms after decoding
  began, 70 ms idle) — and it joins the batch with that token.
- Where passes run on the host (mlx on a CPU: ``Forward.first_read_at_once``), a first sample is read at once
  (``now``): queuing a pass runs most of it there, and the first token waited for the second's (25 ms of 400).
  The pass after it is queued unread (the row holds its token), then steps are pipelined. On a GPU, and for a
  row with a grammar that does not draft (a run forced after its first token is proposed only where that is
  read pipelined), the first sample is pipelined as mlx-lm's (docs/performance.md, part 12).
- A lone row's first prompt chunk is short (``FIRST_CHUNK``) where others may join it and its prompt is long
  (over ``SPLIT_ABOVE`` tokens to read): requests sent together (a client's parallel calls, sub-agents) arrive
  a few milliseconds apart, and a look after this short chunk sees them, so their prompts are read side by side
  from then on (several rows' chunks in one step) rather than one whole prompt first. One more chunk costs one
  more forward pass, about what reading 20–30 prompt tokens costs (the weights read once more: a decode
  step's time): next to nothing for an agent's long prompt, 5–8 % of a 400-token prompt's time to first
  token (measured). A shorter prompt is read whole: one joining waits for at most that much, less than a
  chunk of a long prompt read alone (``PREFILL_STEP``). While nothing decodes yet (a burst), a row whose
  prompt is read waits for the others still reading theirs: the burst's rows sample their first tokens in one
  step and decode in step from then on; a row starting alone first would have the others' prompts read
  between its tokens, and the burst would finish no sooner.
- A row decoding alone steps on its own cache until another row of its model decodes or waits: then it joins
  the batch where it stands — between two tokens, its sampled token still pending (its lane moves with it,
  step.py), a forced run already accepted fed first where the batch cannot take several tokens a row. One
  of another model would wait for the batch to drain anyway: for it, the lone row steps on alone.
- A row left alone in the batch (the others finished or left, no one of its model waiting) steps out onto its
  own cache (``Plan.leave``: a step with nothing else in it) and decodes on as a row alone, drafts included.
- In the batch a row drafts as alone (``Next(hold)``, then ``Verify``) where the batch can hold holes; the
  drafts of a step are cut to the width that pays for the whole batch (speculative/batch_width.py), and a row
  whose draft was cut rests a while (its policy's cooldown). A grammar's forced run is fed whole in one pass.
- The fold hands each row the tokens sampled for it (``Row.accept``: end-of-turn, stop strings and the cap are
  decided there, once), asks a row that read a pipelined token for its proposal (the grammar's forced run), and
  retires the rows that ended. A row ends in the fold (it finished, one of its own hooks failed, the batched
  forward pass it was in failed) or by the plan (its consumer left); one that never stepped ends where it was to
  be taken in (its opening failed: ``admit``; its consumer left while it waited: ``let_go``), and every row in
  flight when the decode loop itself breaks fails there (decoder.py, ``decode_one``). Every way, on the model
  thread, ``Scheduler.retire`` takes it out of the table and the forward and calls ``Row.end()``: the one place a
  generation ends; then it tells the prompt cache whether the entry the row kept is a final answer's
  (``answered``; on a group when rank 0's next message says so: group/lockstep.py).

The per-request hooks a row carries (its logits processors) are described in engine.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import TYPE_CHECKING, Any, Callable

from .plan import (PREFILL_STEP, PREFILL_STEP_SHARED, Next, Plan, Prefill, RowStep, Sample, StepResult, Take,
                   Verify)
from .rows import LEFT, Row
from ..speculative.batch_width import BatchWidth, paused
from ..speculative.fold import fold_drafting, verified
from .step import Forward

if TYPE_CHECKING:
    from ..cache.entries import Kept
    from .token_events import DecodeLoop

FIRST_CHUNK = 32  # the first prompt chunk of a row alone where others may join it (see the rules) ...
SPLIT_ABOVE = 1024  # ... and it has more than this many prompt tokens to read


class Scheduler:
    """The rows in flight for one model at a time, and the plan and fold of each step."""

    def __init__(self, load: Callable[[Any], float | None], max_batch: int, first_chunk: int, seeded: bool,
                 make_forward: Callable[[Any, int], Any] = Forward):
        """``load(backend)``: makes a backend's model resident (the seconds it took, None when it was).
        ``seeded``: a request's seed gives its sampler a random key of its own (rows that may share a
        batch); otherwise mlx-lm's process-wide key is seeded, as ``stream_generate`` alone is used."""
        self.load, self.max_batch, self.first_chunk, self.seeded = load, max_batch, first_chunk, seeded
        self.make_forward = make_forward  # ``(backend, max_batch)``: the forward for a backend's model (step.py)
        self.rows: dict[int, Row] = {}
        self.batched: set[int] = set()  # rows in the batch (the forward holds their caches there)
        self.width = BatchWidth()  # what a batch pass costs, and so how wide drafts may make it
        self.backend = None
        self.forward: Forward | None = None
        self._ids = itertools.count()

    # -- rows in and out --------------------------------------------------------------------------------------
    def admit(self, row: Row) -> None:
        """Open ``row`` (switching models first when the table is empty and it names another); a row that
        cannot start (its model will not load, its sampler or grammar fails) is retired at once."""
        try:
            if self.backend is not row.backend:
                assert not self.rows, "models switch only between rows"
                self.close()
                self.backend = None
                load_s = self.load(row.backend)
                if load_s is not None:  # it loaded the model
                    row.loop.before = dataclasses.replace(row.loop.before, load_s=load_s)
                self.backend, self.forward = row.backend, self.make_forward(row.backend, self.max_batch)
            row.id = next(self._ids)
            self.rows[row.id] = row
            self.forward.own(row.id, row.open(self.forward.model, self.seeded))
        except Exception as exc:
            row.fail(exc)
            self.retire(row)
            return
        # its prompt read but the last token already, with none to generate (``max_tokens`` 0): it ends in the next
        # step's fold, as every row that stepped does (a group's followers open it before they retire it: lockstep.py)
        self._prompt_read(row)

    def let_go(self, row: Row) -> None:
        """A row whose consumer left before it was taken in: it ends as left, never opened."""
        row.ending = LEFT
        self.retire(row)

    def retire(self, row: Row, like: "Kept | None" = None) -> None:
        """Take ``row`` out of the table and the forward (its cache comes back to it), and end it: the only
        caller of ``Row.end`` (``like``: what rank 0 kept of it, on a group follower: group/lockstep.py)."""
        kv = None
        try:
            if row.id is not None and self.rows.pop(row.id, None) is not None:
                self.batched.discard(row.id)
                if self.forward is not None:
                    kv = self.forward.release(row.id)
        except Exception as exc:  # its cache could not be taken out of the batch: it is not kept
            row.fail(exc)
        finally:
            row.end(kv, like)
        self.answered(row)

    def answered(self, row: Row) -> None:
        """A row has ended: where its turn ended with no tool call, the entry it kept is a final answer's
        (``PromptCache.answered_finally``). A group's ranks say so when rank 0's next message does
        (group/lockstep.py)."""
        if row.final and row.kept is not None:
            row.backend.prompt_cache.answered_finally(row.kept)

    @staticmethod
    def _prompt_read(row: Row, figures: tuple = ()) -> None:
        """Its prompt's figures read this step; once the prompt is read, they go out (``Row.prompt_read``). Its
        own tokenizer failing fails the row, not the step."""
        try:
            row.prompt_read(figures)
        except Exception as exc:
            row.fail(exc)

    def close(self) -> None:
        if self.forward is not None:
            self.forward.close()
            self.forward = None
        self.batched.clear()

    # -- the step ---------------------------------------------------------------------------------------------
    def step(self, others_waiting: Callable[[], bool]) -> None:
        """One step for every row in flight: plan → forward → fold."""
        started = time.perf_counter()
        plan = self.plan(others_waiting)
        self.advance(plan)
        if plan.batch and not plan.alone and not plan.join:  # what a batch pass costs (speculative/batch_width.py)
            self.width.observe(plan.batch, time.perf_counter() - started)

    def advance(self, plan: Plan) -> None:
        """The forward on ``plan``, then the fold (rank 0 of a group broadcasts the plan first: lockstep.py)."""
        self.fold(plan, self.forward.run(plan, self.rows))

    def plan(self, others_waiting: Callable[[], bool]) -> Plan:
        """What each row does this step (see the rules at the top)."""
        looked: list[bool] = []

        def waiting() -> bool:  # a look at the inbox, once a plan
            if not looked:
                looked.append(others_waiting())
            return looked[0]

        cancel = tuple(i for i, row in self.rows.items() if row.stopped)
        active = [row for row in self.rows.values() if row.id not in cancel and row.ending is None]
        batched = [row for row in active if row.id in self.batched]
        if len(active) == 1 and len(batched) == 1 and not waiting():
            return Plan(cancel, leave=(batched[0].id,))  # the batch is down to one row: it steps on alone
        crowd = len(active) > 1 or bool(batched) or (bool(active) and waiting())
        decoding = any(row.generated or row.pending for row in active)
        ragged = self.forward.ragged
        alone: list[RowStep] = []
        join: list[int] = []
        batch: list[RowStep] = []
        expecting = {r.id for r in active if r.pending and not r.run and r.speculator is not None
                     and r.speculator.expects_draft()}  # a draft after its pending token (asked once a plan)
        holds = self._holds(active, expecting) if crowd and ragged else set()
        # a burst (nothing decodes yet): a row whose prompt is read waits for the others reading theirs
        burst = not decoding and any(len(row.tokens) - 1 > row.read for row in active)
        for row in active:
            if row.id in self.batched:
                batch.append(self._next(row, True, row.id in holds))
            elif not (row.generated or row.pending):  # its prompt is read on its own cache
                if len(row.tokens) - 1 > row.read or decoding:  # while others decode, its last token too
                    alone.append(self._prompt(row, decoding))
                elif burst:
                    continue  # read: it waits for the burst's others
                elif crowd:  # read but its last token: it joins, and samples its first token in the batch
                    join.append(row.id)
                    batch.append(self._next(row, True, False))
                else:
                    alone.append(self._next(row, False, False))
            elif crowd and (ragged or not row.run):  # it joins where it stands (a run is fed first, alone)
                join.append(row.id)
                batch.append(self._next(row, True, row.id in holds))
            else:
                alone.append(self._next(row, False, row.id in expecting))
        if batch and ragged:
            batch = self.width.fit(batch, self.rows)
        return Plan(cancel, tuple(alone), tuple(join), tuple(batch))

    def _holds(self, active: list[Row], expecting: set[int]) -> set[int]:
        """The batch rows that read their pending token at once for a draft: those ``expecting`` one, where
        drafting together pays (speculative/batch_width.py ``pays``); none otherwise."""
        if not expecting:
            return set()
        rows = [r for r in active if r.id in self.batched or r.generated or r.pending]
        return expecting if self.width.pays([self.rows[i] for i in expecting], len(rows)) else set()

    def _prompt(self, row: Row, decoding: bool) -> RowStep:
        """The next chunk of a row's prompt, all but its last token (short while others decode, or may join:
        see the rules); while others decode, a rest that fits one chunk (its last token alone, where the rest
        is read or cached) is read with the first sample, read at once; then it joins."""
        rest = len(row.tokens) - 1 - row.read
        if decoding and rest < PREFILL_STEP_SHARED and row.prepared.max_tokens > 0:  # (none to sample: prompt only)
            return Sample(row.id, tuple(row.tokens[row.read:]), now=True)
        if decoding:
            n = PREFILL_STEP_SHARED
        else:
            first = row.read == row.loop.cached_tokens and rest > SPLIT_ABOVE
            n = self.first_chunk if first else PREFILL_STEP
        n = min(n, rest)
        return Prefill(row.id, tuple(row.tokens[row.read:row.read + n]))

    def _next(self, row: Row, in_batch: bool, for_draft: bool) -> RowStep:
        """The next step of a row decoding: a forced run, a draft to verify, its last token, or its pending one
        (read with nothing queued after it where a draft follows, ``for_draft``: alone ``Take``, in the batch
        ``Next(hold)``; also where it is the last token its cap allows, as mlx-lm's ``generate_step`` queues no
        step past ``max_tokens``: in the batch a hole, and no pass at all where every row ends there). A batch that
        cannot hold holes gets one-token steps only (batch.py)."""
        spec = row.speculator if not in_batch or self.forward.ragged else None
        if not (row.generated or row.pending):  # its prompt's last token, and its first sample (see the rules)
            now = self.forward.first_read_at_once and (row.speculator is not None or row.loop.grammar_mask is None)
            return Sample(row.id, tuple(row.tokens[row.read:]), now=now)
        if row.run:
            return Sample(row.id, row.run, forced=True)
        if row.holding or (row.generated and not row.pending):
            last = (row.generated[-1],)
            return Verify(row.id, last, row.drafts) if row.drafts and spec is not None else Sample(row.id, last)
        if row.cap_left <= 1 and (not in_batch or self.forward.ragged):  # its last: no pass queued after it
            return Take(row.id)  # (nor a draft: nothing can follow it)
        if spec is not None and for_draft:
            return Next(row.id, hold=True) if in_batch else Take(row.id)
        return Next(row.id)

    def fold(self, plan: Plan, result: StepResult) -> None:
        """Apply a step's result to the rows (the one place it is applied, on every rank of a group alike):
        where their prompts and caches stand, who is in the batch, the tokens sampled for them (handed to
        ``Row.accept`` one at a time), the drafts verified and the next ones, their proposals; then retire
        the rows that ended."""
        rows = self.rows
        steps = {s.row: s for s in (*plan.alone, *plan.batch)}
        for row_id in plan.cancel:
            rows[row_id].ending = LEFT
        self.batched.difference_update(plan.leave)
        self.batched.update(i for i in plan.join if i not in result.failed)
        for row_id, exc in result.failed.items():
            rows[row_id].fail(exc)
            self.batched.discard(row_id)
        for row_id, read in result.read.items():
            rows[row_id].read = read
            self._prompt_read(rows[row_id], result.prompt_logprobs.get(row_id, ()))  # (before its first token)
        for row_id, pending in result.pending.items():
            rows[row_id].pending = pending
        for row_id, s in steps.items():
            row = rows[row_id]
            if isinstance(s, Sample) and s.forced:
                row.run = ()
            elif row.drafts and not isinstance(s, Verify) and row.speculator is not None and paused(row):
                row.speculator.policy.pause()  # its draft was cut (batch_width.py): it rests a while
            row.holding = holds(s)
            if not row.holding:
                row.drafts = ()
        ragged = self.forward is not None and self.forward.ragged
        for row_id, tokens in result.tokens.items():
            row = rows[row_id]
            if row.ending is not None:  # it failed or left in this step: it reads nothing more
                continue
            try:
                step = steps.get(row_id)
                if isinstance(step, Verify):
                    verified(row, step, result.verified[row_id])
                if row.speculator is not None and step is not None:
                    ended, drafts = fold_drafting(row, step, tokens)
                    if drafts is not None:
                        row.drafts = drafts
                else:
                    figures = result.logprobs.get(row_id) or (None,) * len(tokens)
                    ended = any(row.accept(token, f) for token, f in zip(tokens, figures))
                if ended or row.holding or not isinstance(step, Next) or (row_id in self.batched and not ragged):
                    continue
                run = row.propose()
                if row.speculator is not None and run:
                    row.speculator.generated(run, False)
                if not any(row.accept(token) for token in run):
                    row.run = run
            except Exception as exc:  # its own detokenizer, parser or grammar: this row fails, not the step
                row.fail(exc)
        for row in list(rows.values()):
            if row.ending is None and row.error is not None:  # one of its hooks failed in a step
                row.fail(row.error)
        ended = [row for row in rows.values() if row.ending is not None]
        for row in ended:  # their last deltas go out before the work of retiring any of them
            row.flush()
        for row in ended:
            self.retire(row)


def holds(s: RowStep) -> bool:
    """Whether a row holds its last token after ``s`` (read, not in its cache): a draft may follow it."""
    return isinstance(s, (Take, Verify)) or (isinstance(s, Sample) and s.now) or (isinstance(s, Next) and s.hold)


def decode_one(backend, prepared, loop: "DecodeLoop", should_stop: Callable[[], bool],
               make_forward: Callable[[Any, int], Any] = Forward) -> None:
    """One request on its own, to its end, reporting to ``loop`` (``MLXBackend.decode``; the scripted backend
    with its scripted forward): the same step, with one row and no one to join it."""
    scheduler = Scheduler(lambda b: None, 1, PREFILL_STEP, seeded=False, make_forward=make_forward)
    row = Row(backend, prepared, loop=loop, should_stop=should_stop)
    try:
        scheduler.admit(row)
        while scheduler.rows:
            scheduler.step(lambda: False)
    except BaseException as exc:
        if row.id in scheduler.rows:
            row.fail(exc)
            scheduler.retire(row)
        raise
    finally:
        scheduler.close()
