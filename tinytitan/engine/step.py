"""One decode step — plan → forward → fold — for one row or many; this module holds the plan and the forward.

The shape is vLLM V1's ``EngineCore.step()``: the scheduler (``decoder.Scheduler``) makes a ``Plan`` from its
rows, ``Forward.run(plan)`` runs the model on it and returns the tokens sampled per row (``Output``), and the
scheduler folds them back into its rows (``Scheduler.fold``: stop, cap and end-of-turn handling, the proposer,
a finished row's leaving). A lone request, a batch and ``--max-batch 1`` are all this one step.

Rules:
- The plan is plain data: row ids, token ids, flags — never an array, a cache or a callable. It says which rows
  step this time and how (``RowStep``), which rows are cancelled (their consumer left), join the batch or
  step out of it (``leave``), and whether the batch steps. What a row needs to be stepped (its cache,
  sampler, logits processors, where its prompt stands) lives on the row, the same on every process that
  holds it.
- A row steps in one of two places. **On its own KV cache** (a row alone, and a short prompt read ahead while
  others decode): as mlx-lm's ``generate_step`` decodes one request — its prompt in chunks, then one pipelined
  step per token (the next step is queued before the token is read: ``RowStep.pending``), a forced run fed in
  one forward pass (``RowStep.forced``). A batch of one would pay for what batching needs and one row does
  not (a padding mask and per-row offsets in every layer, per-row bookkeeping every step). **In the batch**:
  mlx-lm's ``BatchGenerator``, through its public methods only (``insert`` with the row's own cache, sampler,
  logits processors and held tokens; ``next``; ``remove`` with the prompt caches): one batched decode step for
  every row decoding, one chunk of prompt for rows still reading theirs (as long as the plan says: ``prefill``).
- A row's own sampler and logits processors run wherever it steps, so it samples the same tokens alone, in the
  batch, or moved from one to the other mid-answer (rows.py guards them).
- What the forward returns is what the fold reads: a token sampled by an earlier step (pipelined), never
  text, never an ending. Rows end in the fold, the only place that decides it.

What mlx-lm's public API does not give, and this module owns openly:
- ``Solo``: stepping one row on its own cache by several known tokens at once (a forced run, later a draft)
  and sampling after them with its own processors — ``generate_step`` steps by one sampled token.
- Which batch rows are decoding (not reading a prompt): ``BatchGenerator`` keeps that in a private attribute;
  here it is followed from ``next()``'s prompt responses (``end_of_prompt``).
- A row's cap, stop strings and end-of-turn tokens are the row's to enforce (rows.py), once: the batch's rows
  get no stop sequences and a cap one past their own, so the generator never ends a row by itself.
- Feeding a batch row several known tokens in one step is not in ``BatchGenerator``'s API: inside the batch a
  row decodes token by token (its forced runs are read one token a step).

Where the next two features plug in (both prepared elsewhere; the hooks are these):
- **Speculative decoding** (speculative/): a row stepping alone drafts when its speculator expects a draft
  after its pending token: that token is read with nothing queued after it (``RowStep.hold``), the fold asks
  the speculator for a draft (``Row.drafts``), and the next ``RowStep`` feeds the token and its draft
  (``drafts``) in one forward pass, sampling at every position. ``Solo`` accepts the longest prefix where the
  row's own sample equals the draft (the rule is a pure function of the samples, so every rank of a lockstep
  group decides alike), trims its cache by the rejected count (mlx-lm's ``trim_prompt_cache``) and rolls the
  grammar matcher back over them (llguidance's ``rollback``); the fold hands the accepted tokens to
  ``Row.accept`` one at a time. A step without a draft queues the next pass as before (pipelined). Inside the
  batch rows decode token by token, without drafts; when the batch is down to one row that drafts (the others
  finished or left, no one waiting to join), that row steps out of it (``Plan.leave``, ``Forward._leave``:
  the batch's one-step-ahead token taken back) and drafts again on its own cache.
- **Lockstep over several machines.** Rank 0's scheduler makes the plan; ``Plan.as_ints()`` is what it
  broadcasts (``mx.distributed``) before every rank runs ``Forward.run`` on ``Plan.from_ints(...)``. Every
  rank holds the same rows (opened from the same broadcast requests, with the same seeds), so the same plan
  gives the same forward. Decisions that could diverge are made in one place: cancellations (a consumer
  leaving is seen on rank 0 only) travel in the plan; sampling is the row's own seeded sampler on logits the
  ranks share; what the grammar allows follows from the tokens accepted, which every rank folds alike.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .rows import Row

log = logging.getLogger("tinytitan.batch")

PREFILL_STEP = 2048  # prompt tokens read per chunk (mlx-lm's default) while nothing else decodes
PREFILL_STEP_SHARED = 256  # ... while other rows decode: each of their tokens waits at most this long


@dataclass(frozen=True)
class RowStep:
    """What one row does in one step, on its own cache."""
    row: int
    feed: tuple[int, ...] = ()  # known tokens its cache reads: a prompt chunk, its prompt's rest, a forced run
    sample: bool = True  # a token is sampled after them (False: a chunk in the middle of its prompt)
    pending: bool = False  # its last sampled token (not read yet) is fed first, and the fold reads it now
    forced: bool = False  # ``feed`` is a forced run: the sampler draws once for each of ``feed[1:]``
    now: bool = False  # the token sampled here is read at once, not pipelined (a read-ahead before joining)
    drafts: tuple[int, ...] = ()  # speculative tokens after ``feed``, verified by this forward (see above)
    hold: bool = False  # with ``pending`` and no ``sample``: the row stays on its own cache (a draft follows)


@dataclass(frozen=True)
class Plan:
    """One step of the decoder, as plain data."""
    cancel: tuple[int, ...] = ()  # rows whose consumer left: out of the batch and ended before anything steps
    alone: tuple[RowStep, ...] = ()  # rows stepped on their own caches
    join: tuple[int, ...] = ()  # rows that move into the batch (their own cache with them), after those steps
    batch: bool = False  # the batch steps once
    leave: tuple[int, ...] = ()  # rows that step out of the batch onto their own cache (a lone drafting row)
    prefill: int = PREFILL_STEP  # prompt tokens each batch row still reading its prompt reads in this step

    def as_ints(self) -> list[int]:
        """The plan as a flat list of ints (what lockstep decoding broadcasts)."""
        out = [len(self.cancel), *self.cancel, len(self.leave), *self.leave, len(self.join), *self.join,
               int(self.batch), self.prefill, len(self.alone)]
        for s in self.alone:
            out += [s.row, int(s.sample), int(s.pending), int(s.forced), int(s.now), int(s.hold), len(s.feed),
                    *s.feed, len(s.drafts), *s.drafts]
        return out

    @classmethod
    def from_ints(cls, ints: list[int]) -> "Plan":
        it = iter(ints)

        def take() -> tuple[int, ...]:
            return tuple(next(it) for _ in range(next(it)))

        cancel, leave, join, batch, prefill = take(), take(), take(), bool(next(it)), next(it)
        alone = []
        for _ in range(next(it)):
            row, sample, pending, forced, now, hold = (next(it) for _ in range(6))
            feed = take()
            alone.append(RowStep(row, feed, bool(sample), bool(pending), bool(forced), bool(now), take(),
                                 bool(hold)))
        return cls(cancel, tuple(alone), join, batch, leave=leave, prefill=prefill)


Output = dict  # row id -> the tokens sampled for it that the fold reads now (in order)


class Solo:
    """One row on its own KV cache: the model on the input token(s), the row's logits processors over its
    token context, its sampler; the sampled token is evaluated asynchronously (``pending``)."""

    def __init__(self, model, row: "Row"):
        import mlx.core as mx

        self.model, self.row, self.kv = model, row, row.kv
        # what its cache holds before the next token it reads (one that stepped out of the batch: ``held``)
        context = row.held if row.generated else row.tokens[:-1]
        self.context = mx.array(context, dtype=mx.int32) if row.processors else None
        self.pending = None  # the token sampled last, not read yet
        self.width = 0

    def prefill(self, tokens: tuple[int, ...]) -> None:
        import mlx.core as mx

        self.model(mx.array(tokens)[None], cache=self.kv)
        mx.eval([c.state for c in self.kv])
        mx.clear_cache()
        self.row.read += len(tokens)

    def step(self, s: RowStep) -> tuple[int, ...]:
        """Run ``s``; the tokens the fold reads now."""
        if s.drafts:
            return self._verify(s)
        if not s.sample:
            if s.pending:  # the last sampled token is read, nothing is queued after it (it leaves this cache)
                token, self.pending = self.pending.item(), None
                return (token,)
            self.prefill(s.feed)
            return ()
        if s.pending:
            y = self.pending
            self.pending = self._sample(y)  # queued before ``y`` is read: the forward pass runs meanwhile
            return (y.item(),)
        feed = s.feed
        if self.row.read < len(self.row.tokens):  # the prompt's rest: all but its last token read first
            if len(feed) > 1:
                self.prefill(feed[:-1])
            feed = feed[-1:]
            self.row.read = len(self.row.tokens)
        if s.forced:
            for token in feed[1:]:  # the sampler's draw for each forced token after the first (drawn already)
                self._draw(token)
        self.pending = self._sample(list(feed))
        if s.now:
            token, self.pending = self.pending.item(), None
            return (token,)
        return ()

    def _verify(self, s: RowStep) -> tuple[int, ...]:
        """``s.feed`` (the row's last token) and its draft in one forward pass, a sample at every position; the
        accepted draft prefix and the model's own next token, read now (speculative/verify.py)."""
        import mlx.core as mx

        from .speculative.verify import forward_draft, settle

        row = self.row
        samples = forward_draft(self.model, self.kv, self.context, s.feed, s.drafts, row.processors, row.sampler)
        tokens = samples.tolist()
        spec = row.speculator
        n = settle(self.kv, s.drafts, tokens, row.loop.grammar_mask, spec.sampler if spec is not None else None)
        if self.context is not None:
            self.context = mx.concatenate([self.context, mx.array([*s.feed, *s.drafts[:n]], dtype=mx.int32)])
        row.verified = (len(s.drafts), n)
        return tuple(tokens[:n + 1])

    def _sample(self, inputs: Any):
        import mlx.core as mx

        inputs = mx.array(inputs, dtype=mx.int32) if isinstance(inputs, list) else inputs
        logits = self.model(inputs[None], cache=self.kv)[:, -1, :]
        self.width = logits.shape[-1]
        processors = self.row.processors
        if processors:
            self.context = mx.concatenate([self.context, inputs])
            for processor in processors:
                logits = processor(self.context, logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sampled = self.row.sampler(logprobs)
        mx.async_eval(sampled)
        return sampled

    def _draw(self, token: int) -> None:
        """The sampler's draw for a forced token (its random key moves on as for any token; never evaluated)."""
        import mlx.core as mx

        self.row.sampler(mx.where(mx.arange(self.width) == token, 0.0, -mx.inf)[None])


class Forward:
    """The forward half of the step for one model: rows on their own caches (``Solo``), and the batch (mlx-lm's
    ``BatchGenerator``). ``run(plan, rows)`` executes a plan."""

    def __init__(self, backend, max_batch: int):
        self.backend = backend
        self.model = backend.model
        self.max_batch = max_batch
        self.solos: dict[int, Solo] = {}  # row id -> its own-cache stepping
        self.gen = None  # the BatchGenerator, made when a row first joins
        self.uids: dict[int, int] = {}  # row id -> its uid in the batch
        self.rows_of: dict[int, int] = {}  # uid -> row id
        self.decoding: set[int] = set()  # uids whose prompt is read: they decode
        self.staying: set[int] = set()  # row ids whose cache cannot step out of the batch (not trimmable)

    @property
    def batched(self) -> int:
        """Rows in the batch now."""
        return len(self.uids)

    def in_batch(self, row_id: int) -> bool:
        return row_id in self.uids

    def may_leave(self, row_id: int) -> bool:
        """Whether a row in the batch can step out of it now: it decodes (its prompt is read) and its cache
        can be trimmed (see ``_leave``)."""
        uid = self.uids.get(row_id)
        return uid is not None and uid in self.decoding and row_id not in self.staying

    def _on_stream(self):
        import mlx.core as mx

        stream = self.backend.stream
        return mx.stream(stream) if stream is not None else contextlib.nullcontext()

    # -- the plan ---------------------------------------------------------------------------------------------
    def run(self, plan: Plan, rows: dict[int, "Row"]) -> Output:
        """Execute ``plan``; the tokens each row's fold reads now. A row's own failure (its sampler, a logits
        processor, its own forward pass) marks that row failed; a failure of the batched step raises."""
        out: Output = {}
        for row_id in plan.cancel:
            self.release(rows[row_id])
        for row_id in plan.leave:
            try:
                with self._on_stream():
                    self._leave(rows[row_id])
            except Exception as exc:  # this row fails (it is retired after the step), not the step
                rows[row_id].fail(exc)
        if plan.alone:
            with self._on_stream():
                for s in plan.alone:
                    row = rows[s.row]
                    try:
                        solo = self.solos.get(s.row) or self.solos.setdefault(s.row, Solo(self.model, row))
                        tokens = solo.step(s)
                    except Exception as exc:
                        self.solos.pop(s.row, None)
                        row.fail(exc)
                        continue
                    if (s.now or (s.pending and not s.sample)) and not s.hold:  # it leaves its own cache (joins)
                        self.solos.pop(s.row, None)
                    row.pending = solo.pending is not None
                    if s.forced:
                        row.run = ()
                    if tokens:
                        out[s.row] = tokens
        try:
            for row_id in plan.join:
                self._insert(rows[row_id])
            if plan.batch:
                out.update(self._step_batch(plan.prefill))
        except Exception as exc:  # the batched forward pass failed: the rows in it fail, the others go on
            log.exception("batched decode step failed")
            for row_id in self.fail_batch():
                rows[row_id].kv = None
                rows[row_id].fail(exc)
        return out

    def release(self, row: "Row") -> None:
        """``row`` leaves: out of the batch (its cache back on the row) or off its own cache."""
        self.solos.pop(row.id, None)
        self.staying.discard(row.id)
        uid = self.uids.pop(row.id, None)
        if uid is None:
            return
        self.rows_of.pop(uid, None)
        self.decoding.discard(uid)
        if self.gen is not None:
            caches = self.gen.remove([uid], return_prompt_caches=True)
            row.kv = caches[uid][0] if uid in caches else None

    def fail_batch(self) -> list[int]:
        """The batched step failed: every row in it is out (their caches dropped), and the generator is made
        anew. The row ids that were in it."""
        failed = list(self.uids)
        self.uids.clear()
        self.staying.clear()
        self.rows_of.clear()
        self.decoding.clear()
        self.close()
        return failed

    # -- the batch --------------------------------------------------------------------------------------------
    def _insert(self, row: "Row") -> None:
        """``row`` joins the batch where it stands: what its cache holds, what it has still to read (the rest of
        its prompt, or its last sampled token), its own sampler and processors; its cap one past what it has
        left, and no stop sequences (the row ends itself: see the rules)."""
        from mlx_lm.generate import BatchGenerator, StopSequences

        if self.gen is None:
            kwargs = {"stream": self.backend.stream} if self.backend.stream is not None else {}
            self.gen = BatchGenerator(self.model, completion_batch_size=self.max_batch,
                                      prefill_batch_size=self.max_batch, prefill_step_size=PREFILL_STEP, **kwargs)
        prompt = self.row_prompt(row)
        [uid] = self.gen.insert([prompt], max_tokens=[row.cap_left + 1], caches=[row.kv], all_tokens=[row.held],
                                samplers=[row.sampler], logits_processors=[row.processors],
                                stop_sequences=[StopSequences()])
        row.kv = None  # the batch holds it now
        self.solos.pop(row.id, None)  # a row that joins mid-prompt leaves its own-cache stepping behind
        self.uids[row.id], self.rows_of[uid] = uid, row.id

    def _leave(self, row: "Row") -> None:
        """``row`` steps out of the batch onto its own cache, standing where a row alone holding its last token
        stands (rows.py ``held``): its cache holds its prompt and every token it accepted but the last, its
        grammar matcher has not consumed that last token, its sampler has not drawn the token after it.

        The batch is one step ahead (mlx-lm's ``GenerationBatch``): when it hands out a token it has already
        read it into the cache, run the logits processors after it (the grammar mask consumed it) and drawn
        the next token, which stays inside the generator. So the cache is trimmed by one, the matcher rolled
        back by one (llguidance's ``rollback``) and the seeded sampler's key chain set back by the one draw
        (``RowSampler.undo``); the next step reads the last token again on the row's own cache and samples
        the position after it as the batch would have (with a draft after it, or none). A cache that cannot
        be trimmed (a sliding window past its size, a recurrent state) stays in the batch."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        uid = self.uids[row.id]
        [(cache, held)] = self.gen.extract_cache([uid]).values()
        if not can_trim_prompt_cache(cache) or list(held) != row.tokens + row.generated:
            self.staying.add(row.id)
            return
        self.gen.remove([uid])
        del self.uids[row.id], self.rows_of[uid]
        self.decoding.discard(uid)
        trim_prompt_cache(cache, 1)
        mask = row.loop.grammar_mask
        if mask is not None and not mask.failed and mask.started:
            mask.matcher.rollback(1)
        spec = row.speculator
        if spec is not None and spec.sampler is not None:
            spec.sampler.undo()
        row.kv = cache

    @staticmethod
    def row_prompt(row: "Row") -> list[int]:
        """What a row joining the batch has still to read: the rest of its prompt, or its last sampled token."""
        return row.left_to_read if row.read < len(row.tokens) or not row.generated else row.generated[-1:]

    def _step_batch(self, prefill: int) -> Output:
        gen = self.gen
        gen.prefill_step_size = prefill
        prompts, responses = gen.next()
        for p in prompts:
            if p.end_of_prompt:
                self.decoding.add(p.uid)
        return {self.rows_of[r.uid]: (r.token,) for r in responses if r.uid in self.rows_of}

    def close(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None
