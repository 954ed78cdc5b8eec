"""One decode step — plan → forward → fold — for one row or many; this module holds the forward.

The shape is vLLM V1's ``EngineCore.step()``: the scheduler (``scheduler.Scheduler``) makes a ``Plan`` from its
rows, ``Forward.run(plan)`` runs the model on it and returns what it did as a plain value (``StepResult``: the
tokens read per row, where each row's prompt stands, which rows failed), and the scheduler folds that back
into its rows (``Scheduler.fold``: stop, cap and end-of-turn handling, the proposer, drafts, a finished row's
leaving). A lone request, a batch, ``--max-batch 1`` and every rank of a group are all this one step; the plan
and the result are defined in plan.py.

One owner per piece of state: the scheduler owns the rows and their lifecycle (what they accepted, where their
prompt stands, whether they are in the batch, how they end); the forward owns the device state (each row's
lane and KV cache, the batch and who is in it) and writes nothing on a row. (It calls a row's hooks, its
sampler and logits processors; a hook that raises notes that on its own row, ``Row.error``, for the fold to
end the row: rows.py.)

Rules:
- The plan is plain data: row ids, token ids, flags — never an array, a cache or a callable. It says what each
  row does this step (``RowStep``: one of five shapes), on its own cache (``alone``) or in the batch
  (``batch``), which rows are cancelled (their consumer left), join the batch or leave it.
- A row steps in one of two places, the same way. **On its own KV cache** (a row alone, and every prompt):
  as mlx-lm's ``generate_step`` decodes one request — its prompt in chunks, then one pipelined step per token
  (the next pass is queued before the token is read: ``Next``), a forced run or a draft fed in one pass.
  **In the batch** (batch.py): every batch row in one forward pass, each with its own shape — a pipelined
  token, its last token, a forced run, a draft to verify — the narrower rows padded, their padding and the
  rejected drafts left as holes the mask hides (ragged.py). A batch of one would pay for what batching needs
  and one row does not (a padding mask and per-row offsets in every layer), so a row left alone leaves it.
- What a row needs to step (its sampler, processors, pending sample, token context, prompt position) is its
  lane (lane.py), which moves with it: a row samples the same tokens alone, in the batch, or moved from one to
  the other mid-answer, and joins or leaves between any two steps without reading or drawing anything again.
- One thing the forward stores itself: a row that has read its prompt but the last token leaves a checkpoint
  of its cache in its backend's prompt cache where the cache cannot be trimmed back (cache/checkpoint.py). The
  cache is the forward's, so the snapshot is taken there; nothing of it travels in the plan or the result.
- What the forward returns is what the fold reads: tokens read, where prompts stand, what verifies accepted,
  failures — never text, never an ending. A row that steps ends in the fold, the only place that decides it
  (scheduler.py says where the others end).

Where speculative decoding and lockstep decoding plug in:
- **Speculative decoding** (speculative/): a row whose speculator expects a draft after its pending token
  reads that token with nothing queued after it (``Take`` alone; ``Next(hold)`` in the batch reads the pass's
  sample too), the fold asks the speculator for a draft (``Row.drafts``), and the next step (``Verify``)
  feeds the row's last token and its draft in one pass, sampling at every position. The longest prefix where
  the row's own sample equals the draft is accepted (a pure function of the samples, so every rank of a group
  decides alike); the rest is trimmed from its own cache (mlx-lm's ``trim_prompt_cache``) or left as holes in
  the batch's; the fold rolls the grammar matcher back over them (llguidance's ``rollback``), moves the seeded
  sampler's key chain on by the rows used, and hands the accepted tokens to ``Row.accept`` one at a time. In
  the batch a draft widens everyone's pass: the scheduler cuts drafts to the width that pays
  (speculative/batch_width.py). A batch whose cache cannot hold holes (a sliding window, a recurrent state)
  feeds one token a row a pass: its rows decode there without drafts, and read forced runs token by token.
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
from typing import TYPE_CHECKING

from .batch import Batch
from .lane import Lane
from .logprobs import prompt_figures
from .plan import (PREFILL_STEP, PREFILL_STEP_SHARED, Next, Plan, Prefill, RowStep, Sample, StepResult, Take,
                   Verify)

if TYPE_CHECKING:
    from .rows import Row

__all__ = ["PREFILL_STEP", "PREFILL_STEP_SHARED", "Forward", "Next", "Plan", "Prefill", "RowStep", "Sample",
           "StepResult", "Take", "Verify"]

log = logging.getLogger("tinytitan.batch")


def step_alone(model, lane: Lane, kv: list, s: RowStep, prompt_cache=None) -> tuple[int, ...]:
    """One row on its own KV cache: run ``s``; the tokens the fold reads now. ``prompt_cache``: where a
    checkpoint at its prompt's end goes (None: none is kept)."""
    import mlx.core as mx

    if isinstance(s, Prefill):
        _prefill(model, lane, kv, s.tokens)
        return ()
    if isinstance(s, Take):  # the last sampled token is read, nothing is queued after it
        return (lane.take(),)
    if isinstance(s, Next):
        y = lane.pending
        lane.pending = _sample(model, lane, kv, y)  # queued before ``y`` is read: the pass runs meanwhile
        return (y.item(),)
    if isinstance(s, Verify):
        return _verify(model, lane, kv, s)
    feed = s.tokens
    row = lane.row
    if lane.read < len(row.tokens):  # the prompt's rest: all but its last token read first
        if len(feed) > 1:
            _prefill(model, lane, kv, feed[:-1])
        feed = feed[-1:]
        lane.read = len(row.tokens)
        if prompt_cache is not None:
            _checkpoint(prompt_cache, row, kv)
    if s.forced:
        for token in feed[1:]:  # the sampler's draw for each forced token after the first (drawn already)
            lane.draw(token)
    lane.pending = _sample(model, lane, kv, mx.array(list(feed), dtype=mx.int32))
    if s.now:
        return (lane.take(),)
    return ()


def _checkpoint(prompt_cache, row: "Row", kv: list) -> None:
    """``kv`` holds ``row``'s prompt but its last token: a cache that cannot be trimmed back is kept at this
    point (cache/checkpoint.py), a shared prompt the prompt cache will not hold handed to its request's other rows
    (``row.handed``: its engine's, cache/handoff.py)."""
    from ..cache.handoff import keep_prompt

    keep_prompt(prompt_cache, row.handed, row.prepared, row.tokens[:-1], kv, row.cap_left)


def _prefill(model, lane: Lane, kv: list, tokens: tuple[int, ...]) -> None:
    import mlx.core as mx

    logits = model(mx.array(tokens)[None], cache=kv)
    if lane.prompt_top is not None:  # each position's logits give the next prompt token's figures (logprobs.py)
        after = lane.row.tokens[lane.read + 1:lane.read + 1 + len(tokens)]
        lane.prompt_figures += prompt_figures(logits[0], after, lane.prompt_top)
    del logits
    mx.eval([c.state for c in kv])
    mx.clear_cache()
    lane.read += len(tokens)


def _sample(model, lane: Lane, kv: list, inputs):
    import mlx.core as mx

    sampled = lane.sample(model(inputs[None], cache=kv)[:, -1, :], inputs)
    mx.async_eval(sampled)
    return sampled


def _verify(model, lane: Lane, kv: list, s: Verify) -> tuple[int, ...]:
    """``s.tokens`` (the row's last token) and its draft in one forward pass, a sample at every position; the
    cache trimmed past the rejected draft tokens. The accepted draft prefix and the model's own next token,
    read now (speculative/verify.py); the fold rolls the row's grammar and sampler to match."""
    import mlx.core as mx
    from mlx_lm.models.cache import trim_prompt_cache

    from ..speculative.verify import accepted_prefix

    inputs = mx.array([*s.tokens, *s.drafts], dtype=mx.int32)
    logits = model(inputs[None], cache=kv)[0, len(s.tokens) - 1:]
    samples = lane.samples(logits, inputs, len(s.tokens))
    tokens = samples.tolist()
    n = accepted_prefix(s.drafts, tokens)
    if len(s.drafts) > n and trim_prompt_cache(kv, len(s.drafts) - n) != len(s.drafts) - n:
        # (a row drafts only on a cache that stays trimmable: Row.open) never a cache left holding rejected tokens
        raise RuntimeError("the KV cache could not be trimmed past a rejected draft")
    lane.verified([*s.tokens, *s.drafts[:n]])
    return tuple(tokens[:n + 1])


def _runs_on_host(stream) -> bool:
    """Whether the model's passes run on the host (mlx on a CPU: queuing a pass runs most of it before it
    returns), where a row's first sample is read at once rather than after the next pass is queued (scheduler.py);
    on a GPU a queued pass runs on the device while the host builds the next one."""
    import mlx.core as mx

    device = stream.device if stream is not None else mx.default_device()
    return device.type == mx.DeviceType.cpu


class Forward:
    """The forward half of the step for one model, and the owner of its device state: each row's lane and its
    KV cache — its own (``own``/``release``) or a row of the batch (batch.py). ``run(plan, rows)`` executes a
    plan and returns a ``StepResult``; it calls the rows' hooks (sampler, processors) and writes nothing on
    them."""

    def __init__(self, backend, max_batch: int):
        from mlx_lm.models.cache import make_prompt_cache

        self.backend = backend
        self.model = backend.model
        self.max_batch = max_batch
        self.caches: dict[int, list] = {}  # row id -> its own KV cache (a row not in the batch)
        self.lanes: dict[int, Lane] = {}  # row id -> its lane (made at its first step)
        self.batch = Batch(self.model, make_prompt_cache(self.model) if self.model is not None else [])
        from ..cache.checkpoint import target

        self.checkpoints = target(backend)  # the prompt cache its rows' checkpoints go to (None: none kept)
        self.first_read_at_once = _runs_on_host(backend.stream)

    @property
    def ragged(self) -> bool:
        """Whether batch rows may read several tokens in one pass (drafts, forced runs): the model's cache."""
        return self.batch.holey

    def own(self, row_id: int, kv: list) -> None:
        """The KV cache a row starts from (a cached prefix of its prompt, or a new one)."""
        self.caches[row_id] = kv

    def _on_stream(self):
        import mlx.core as mx

        stream = self.backend.stream
        return mx.stream(stream) if stream is not None else contextlib.nullcontext()

    def _lane(self, row: "Row") -> Lane:
        lane = self.lanes.get(row.id)
        if lane is None:
            lane = self.lanes[row.id] = Lane(row)
        return lane

    # -- the plan ---------------------------------------------------------------------------------------------
    def run(self, plan: Plan, rows: dict[int, "Row"]) -> StepResult:
        """Execute ``plan``. A row's own failure (its own forward pass, leaving the batch) is that row's
        (``failed``), never the step's; a failure of the batched forward pass fails the rows in it."""
        out = StepResult()
        for row_id in plan.cancel:  # out of the batch before it steps; the fold's retire takes the cache
            kv = self.release(row_id)
            if kv is not None:
                self.caches[row_id] = kv
        with self._on_stream():
            for row_id in plan.leave:
                try:
                    self._leave(row_id)
                except Exception as exc:  # this row fails (it is retired after the step), not the step
                    out.failed[row_id] = exc
            for s in plan.alone:
                self._alone(s, rows[s.row], out)
            joining = []
            for row_id in plan.join:
                if row_id not in out.failed:
                    try:
                        self._joins(rows[row_id])
                        joining.append(row_id)
                    except Exception as exc:  # this row fails, not the batch it was to join
                        self._drop(row_id)
                        out.failed[row_id] = exc
            try:
                if joining:
                    self.batch.add(joining, [self.caches.pop(i) for i in joining])
                steps = {s.row: s for s in plan.batch if s.row not in out.failed}
                if steps:
                    tokens, verified = self.batch.step(steps, self.lanes)
                    out.tokens.update(tokens)
                    for row_id, read in tokens.items():  # the figures of the tokens read, for rows that ask
                        if self.lanes[row_id].logprobs is not None:
                            out.logprobs[row_id] = self.lanes[row_id].logprobs.read(len(read))
                    out.verified.update(verified)
                    for row_id in steps:
                        out.pending[row_id] = self.lanes[row_id].pending is not None
                        out.read[row_id] = self.lanes[row_id].read
            except Exception as exc:  # the merge or the batched pass failed: the rows in it (and those that were
                log.exception("batched decode step failed")  # joining it) fail, the others go on
                for row_id in {*self.batch.clear(), *joining}:  # their caches and lanes dropped
                    self._drop(row_id)
                    out.failed[row_id] = exc
        return out

    def _drop(self, row_id: int) -> None:
        """A row failed in a step: its lane and whatever cache of its own it still has go."""
        self.lanes.pop(row_id, None)
        self.caches.pop(row_id, None)

    def _joins(self, row: "Row") -> None:
        """A row about to join the batch: its lane; where its prompt is read but the last token, its checkpoint
        (as a row alone leaves one there: step_alone)."""
        lane = self._lane(row)
        if self.checkpoints is not None and lane.read == len(row.tokens) - 1:
            _checkpoint(self.checkpoints, row, self.caches[row.id])

    def _leave(self, row_id: int) -> None:
        """A row steps out of the batch onto its own cache (its valid positions), its lane with it."""
        self.caches[row_id] = self.batch.remove(row_id)

    def _alone(self, s: RowStep, row: "Row", out: StepResult) -> None:
        try:
            lane = self._lane(row)
            tokens = step_alone(self.model, lane, self.caches[s.row], s, self.checkpoints)
        except Exception as exc:  # its cache may be half-written: dropped with it
            self._drop(s.row)
            out.failed[s.row] = exc
            return
        out.read[s.row] = lane.read
        out.pending[s.row] = lane.pending is not None
        if lane.prompt_figures:  # its prompt's figures, from the chunk it read (logprobs.py)
            out.prompt_logprobs[s.row], lane.prompt_figures = tuple(lane.prompt_figures), []
        if isinstance(s, Verify):
            out.verified[s.row] = len(tokens) - 1
        if tokens:
            out.tokens[s.row] = tokens
            if lane.logprobs is not None:  # the figures of the tokens read (logprobs.py)
                out.logprobs[s.row] = lane.logprobs.read(len(tokens))

    def release(self, row_id: int) -> list | None:
        """A row leaves: out of the batch or off its own cache; the KV cache it holds (None: none kept)."""
        self.lanes.pop(row_id, None)
        if row_id in self.batch:
            return self.batch.remove(row_id)
        return self.caches.pop(row_id, None)

    def close(self) -> None:
        self.batch.clear()
        self.lanes.clear()
        self.caches.clear()
