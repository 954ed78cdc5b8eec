"""One decode step — plan → forward → fold — for one row or many; this module holds the plan and the forward.

The shape is vLLM V1's ``EngineCore.step()``: the scheduler (``decoder.Scheduler``) makes a ``Plan`` from its
rows, ``Forward.run(plan)`` runs the model on it and returns what it did as a plain value (``StepResult``: the
tokens sampled per row, where each row's cache stands, which rows failed), and the scheduler folds that back
into its rows (``Scheduler.fold``: stop, cap and end-of-turn handling, the proposer, drafts, a finished row's
leaving). A lone request, a batch, ``--max-batch 1`` and every rank of a group are all this one step; the plan
and the result are defined in plan.py.

One owner per piece of state: the scheduler owns the rows and their lifecycle (what they accepted, where their
prompt stands, whether they are in the batch, how they end); the forward owns the device state (each row's
own KV cache, the batch and who is in it) and writes nothing on a row.

Rules:
- The plan is plain data: row ids, token ids, flags — never an array, a cache or a callable. It says which rows
  step this time and how (``RowStep``: one of five shapes), which rows are cancelled (their consumer left),
  join the batch or step out of it (``leave``), and whether the batch steps. What a row needs to be stepped
  (its sampler, logits processors, where its prompt stands) lives on the row and its cache in the forward,
  the same on every process that holds it.
- A row steps in one of two places. **On its own KV cache** (a row alone, and a short prompt read ahead while
  others decode): as mlx-lm's ``generate_step`` decodes one request — its prompt in chunks, then one pipelined
  step per token (the next step is queued before the token is read: ``Next``), a forced run fed in
  one forward pass (``Sample(forced=True)``). A batch of one would pay for what batching needs and one row does
  not (a padding mask and per-row offsets in every layer, per-row bookkeeping every step). **In the batch**:
  mlx-lm's ``BatchGenerator``, through its public methods only (``insert`` with the row's own cache, sampler,
  logits processors and held tokens; ``next``; ``remove`` with the prompt caches): one batched decode step for
  every row decoding, one chunk of prompt for rows still reading theirs (as long as the plan says: ``prefill``).
- A row's own sampler and logits processors run wherever it steps, so it samples the same tokens alone, in the
  batch, or moved from one to the other mid-answer (rows.py guards them).
- What the forward returns is what the fold reads: tokens sampled (by an earlier step, when pipelined), where
  caches stand, failures — never text, never an ending. Rows end in the fold, the only place that decides it.
- One thing the forward stores itself: a row on its own cache that has read its prompt but the last token
  leaves a checkpoint of that cache in its backend's prompt cache where the cache cannot be trimmed back
  (cache/checkpoint.py). The cache is the forward's, so the snapshot is taken there; nothing of it travels in
  the plan or the result.

What mlx-lm's public API does not give, and this module owns openly:
- ``Solo``: stepping one row on its own cache by several known tokens at once (a forced run, a draft) and
  sampling after them with its own processors — ``generate_step`` steps by one sampled token.
- Which batch rows are decoding (not reading a prompt): ``BatchGenerator`` keeps that in a private attribute;
  the forward reports it from ``next()``'s prompt responses (``end_of_prompt``: ``StepResult.decoding``) and
  the scheduler keeps it.
- A row's cap, stop strings and end-of-turn tokens are the row's to enforce (rows.py), once: the batch's rows
  get no stop sequences and a cap one past their own, so the generator never ends a row by itself.
- Feeding a batch row several known tokens in one step is not in ``BatchGenerator``'s API: inside the batch a
  row decodes token by token (its forced runs are read one token a step).

Where speculative decoding and lockstep decoding plug in:
- **Speculative decoding** (speculative/): a row stepping alone drafts when its speculator expects a draft
  after its pending token: that token is read with nothing queued after it (``Take(hold=True)``), the fold
  asks the speculator for a draft (``Row.drafts``), and the next step (``Verify``) feeds the token and its
  draft in one forward pass, sampling at every position. ``Solo`` accepts the longest prefix where the
  row's own sample equals the draft (the rule is a pure function of the samples, so every rank of a lockstep
  group decides alike) and trims its cache by the rejected count (mlx-lm's ``trim_prompt_cache``); the fold
  rolls the grammar matcher back over them (llguidance's ``rollback``), moves the seeded sampler's key chain
  on by the rows used, and hands the accepted tokens to ``Row.accept`` one at a time. A step without a draft
  queues the next pass as before (pipelined). Inside the batch rows decode token by token, without drafts;
  when the batch is down to one row that drafts (the others finished or left, no one waiting to join), that
  row steps out of it (``Plan.leave``, ``Forward._leave``: the batch's one-step-ahead token taken back) and
  drafts again on its own cache.
- **Lockstep over several machines.** Rank 0's scheduler makes the plan; ``Plan.as_ints()`` is what it
  broadcasts (``mx.distributed``) before every rank runs ``Forward.run`` on ``Plan.from_ints(...)``. Every
  rank holds the same rows (opened from the same broadcast requests, with the same seeds), so the same plan
  gives the same forward, and every rank applies its result with the same fold. Decisions that could diverge
  are made in one place: cancellations (a consumer leaving is seen on rank 0 only) travel in the plan, and
  endings only rank 0 can see (a stop string in the text) in its message; sampling is the row's own seeded
  sampler on logits the ranks share; what the grammar allows follows from the tokens accepted, which every
  rank folds alike.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from .plan import (PREFILL_STEP, PREFILL_STEP_SHARED, Next, Plan, Prefill, RowStep, Sample, StepResult, Take,
                   Verify, leaves_own_cache)

if TYPE_CHECKING:
    from .rows import Row

__all__ = ["PREFILL_STEP", "PREFILL_STEP_SHARED", "Forward", "Next", "Plan", "Prefill", "RowStep", "Sample",
           "Solo", "StepResult", "Take", "Verify"]

log = logging.getLogger("tinytitan.batch")


class Solo:
    """One row on its own KV cache: the model on the input token(s), the row's logits processors over its
    token context, its sampler; the sampled token is evaluated asynchronously (``pending``). It reads the row's
    hooks and tokens and writes nothing on it: where its cache stands is its own (``read``)."""

    def __init__(self, model, row: "Row", kv: list, prompt_cache=None):
        import mlx.core as mx

        self.model, self.row, self.kv = model, row, kv
        self.prompt_cache = prompt_cache  # where a checkpoint at its prompt's end goes (cache/checkpoint.py)
        self.read = row.read  # prompt tokens its cache holds
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
        self.read += len(tokens)

    def step(self, s: RowStep) -> tuple[int, ...]:
        """Run ``s``; the tokens the fold reads now."""
        if isinstance(s, Verify):
            return self._verify(s)
        if isinstance(s, Prefill):
            self.prefill(s.tokens)
            return ()
        if isinstance(s, Take):  # the last sampled token is read, nothing is queued after it
            token, self.pending = self.pending.item(), None
            return (token,)
        if isinstance(s, Next):
            y = self.pending
            self.pending = self._sample(y)  # queued before ``y`` is read: the forward pass runs meanwhile
            return (y.item(),)
        feed = s.tokens
        if self.read < len(self.row.tokens):  # the prompt's rest: all but its last token read first
            if len(feed) > 1:
                self.prefill(feed[:-1])
            feed = feed[-1:]
            from ..cache.checkpoint import keep  # a cache that cannot be trimmed back: kept at this point

            keep(self.prompt_cache, self.row.tokens[:-1], self.kv, self.row.prepared.image_runs, self.row.cap_left)
            self.read = len(self.row.tokens)
        if s.forced:
            for token in feed[1:]:  # the sampler's draw for each forced token after the first (drawn already)
                self._draw(token)
        self.pending = self._sample(list(feed))
        if s.now:
            token, self.pending = self.pending.item(), None
            return (token,)
        return ()

    def _verify(self, s: Verify) -> tuple[int, ...]:
        """``s.tokens`` (the row's last token) and its draft in one forward pass, a sample at every position;
        the cache trimmed past the rejected draft tokens. The accepted draft prefix and the model's own next
        token, read now (speculative/verify.py); the fold rolls the row's grammar and sampler to match."""
        import mlx.core as mx
        from mlx_lm.models.cache import trim_prompt_cache

        from ..speculative.verify import accepted_prefix, forward_draft

        row = self.row
        samples = forward_draft(self.model, self.kv, self.context, s.tokens, s.drafts, row.processors,
                                row.sampler)
        tokens = samples.tolist()
        n = accepted_prefix(s.drafts, tokens)
        if len(s.drafts) > n:
            trim_prompt_cache(self.kv, len(s.drafts) - n)
        if self.context is not None:
            self.context = mx.concatenate([self.context, mx.array([*s.tokens, *s.drafts[:n]], dtype=mx.int32)])
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
    """The forward half of the step for one model, and the owner of its device state: each row's own KV cache
    (``own``/``release``), the rows stepping on them (``Solo``), and the batch (mlx-lm's ``BatchGenerator``)
    with who is in it. ``run(plan, rows)`` executes a plan and returns a ``StepResult``; it reads the rows'
    hooks (sampler, processors) and writes nothing on them."""

    def __init__(self, backend, max_batch: int):
        self.backend = backend
        self.model = backend.model
        self.max_batch = max_batch
        self.caches: dict[int, list] = {}  # row id -> its own KV cache (a row not in the batch)
        self.solos: dict[int, Solo] = {}  # row id -> its own-cache stepping
        self.gen = None  # the BatchGenerator, made when a row first joins
        self.uids: dict[int, int] = {}  # row id -> its uid in the batch
        self.rows_of: dict[int, int] = {}  # uid -> row id

    def in_batch(self, row_id: int) -> bool:
        return row_id in self.uids

    def own(self, row_id: int, kv: list) -> None:
        """The KV cache a row starts from (a cached prefix of its prompt, or a new one)."""
        self.caches[row_id] = kv

    def _on_stream(self):
        import mlx.core as mx

        stream = self.backend.stream
        return mx.stream(stream) if stream is not None else contextlib.nullcontext()

    # -- the plan ---------------------------------------------------------------------------------------------
    def run(self, plan: Plan, rows: dict[int, "Row"]) -> StepResult:
        """Execute ``plan``. A row's own failure (its own forward pass, stepping out of the batch) is that row's
        (``failed``), never the step's; a failure of the batched forward pass fails the rows in it."""
        out = StepResult()
        for row_id in plan.cancel:  # out of the batch before it steps; the fold's retire takes the cache
            kv = self.release(row_id)
            if kv is not None:
                self.caches[row_id] = kv
        left, staying = [], []
        for row_id in plan.leave:
            try:
                with self._on_stream():
                    (left if self._leave(rows[row_id]) else staying).append(row_id)
            except Exception as exc:  # this row fails (it is retired after the step), not the step
                out.failed[row_id] = exc
        out.left, out.staying = tuple(left), tuple(staying)
        if plan.alone:
            with self._on_stream():
                for s in plan.alone:
                    self._alone(s, rows[s.row], out)
        try:
            for row_id in plan.join:
                self._insert(rows[row_id])
            if plan.batch:
                self._step_batch(plan.prefill, out)
        except Exception as exc:  # the batched forward pass failed: the rows in it fail, the others go on
            log.exception("batched decode step failed")
            for row_id in self.fail_batch():
                out.failed[row_id] = exc
        return out

    def _alone(self, s: RowStep, row: "Row", out: StepResult) -> None:
        try:
            solo = self.solos.get(s.row)
            if solo is None:
                from ..cache.checkpoint import target

                solo = self.solos[s.row] = Solo(self.model, row, self.caches[s.row], target(self.backend))
            tokens = solo.step(s)
        except Exception as exc:  # its cache may be half-written: dropped with it
            self.solos.pop(s.row, None)
            self.caches.pop(s.row, None)
            out.failed[s.row] = exc
            return
        out.read[s.row] = solo.read
        out.pending[s.row] = solo.pending is not None
        if isinstance(s, Verify):
            out.verified[s.row] = len(tokens) - 1
        if leaves_own_cache(s):
            self.solos.pop(s.row, None)
        if tokens:
            out.tokens[s.row] = tokens

    def release(self, row_id: int) -> list | None:
        """A row leaves: out of the batch or off its own cache; the KV cache it holds (None: none kept)."""
        self.solos.pop(row_id, None)
        kv = self.caches.pop(row_id, None)
        uid = self.uids.pop(row_id, None)
        if uid is None:
            return kv
        self.rows_of.pop(uid, None)
        if self.gen is None:
            return None
        caches = self.gen.remove([uid], return_prompt_caches=True)
        return caches[uid][0] if uid in caches else None

    def fail_batch(self) -> list[int]:
        """The batched step failed: every row in it is out (their caches dropped), and the generator is made
        anew. The row ids that were in it."""
        failed = list(self.uids)
        self.uids.clear()
        self.rows_of.clear()
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
        [uid] = self.gen.insert([prompt], max_tokens=[row.cap_left + 1], caches=[self.caches.pop(row.id)],
                                all_tokens=[row.held], samplers=[row.sampler], logits_processors=[row.processors],
                                stop_sequences=[StopSequences()])
        self.solos.pop(row.id, None)  # a row that joins mid-prompt leaves its own-cache stepping behind
        self.uids[row.id], self.rows_of[uid] = uid, row.id

    def _leave(self, row: "Row") -> bool:
        """``row`` steps out of the batch onto its own cache, standing where a row alone holding its last token
        stands (rows.py ``held``): its cache holds its prompt and every token it accepted but the last. False
        when its cache cannot (it stays in the batch).

        The batch is one step ahead (mlx-lm's ``GenerationBatch``): when it hands out a token it has already
        read it into the cache, run the logits processors after it (the grammar mask consumed it) and drawn
        the next token, which stays inside the generator. So the cache is trimmed by one here, and the fold
        rolls the grammar matcher back by one (llguidance's ``rollback``) and sets the seeded sampler's key
        chain back by the one draw (``RowSampler.undo``); the next step reads the last token again on the
        row's own cache and samples the position after it as the batch would have. A cache that cannot be
        trimmed (a sliding window past its size, a recurrent state) stays in the batch."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        uid = self.uids[row.id]
        [(cache, held)] = self.gen.extract_cache([uid]).values()
        if not can_trim_prompt_cache(cache) or list(held) != row.tokens + row.generated:
            return False
        self.gen.remove([uid])
        del self.uids[row.id], self.rows_of[uid]
        trim_prompt_cache(cache, 1)
        self.caches[row.id] = cache
        return True

    @staticmethod
    def row_prompt(row: "Row") -> list[int]:
        """What a row joining the batch has still to read: the rest of its prompt, or its last sampled token."""
        return row.left_to_read if row.read < len(row.tokens) or not row.generated else row.generated[-1:]

    def _step_batch(self, prefill: int, out: StepResult) -> None:
        gen = self.gen
        gen.prefill_step_size = prefill
        prompts, responses = gen.next()
        out.decoding = tuple(self.rows_of[p.uid] for p in prompts if p.end_of_prompt and p.uid in self.rows_of)
        for r in responses:
            if r.uid in self.rows_of:
                out.tokens[self.rows_of[r.uid]] = (r.token,)

    def close(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None
