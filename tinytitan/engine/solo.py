"""A lone member decodes outside the batch until someone joins it.

Rules:
- A member that arrives to an empty batch is decoded here, on a plain KV cache, as mlx-lm's own
  ``generate_step`` decodes one request: its prompt in chunks, then one pipelined step per token (the next
  step is queued before the current token is read). A batch of one pays for what batching needs and one
  request does not (a padding mask and per-row offsets in every layer, per-row bookkeeping every step).
- Between two chunks of its prompt (the first one short) and between two tokens it looks at the inbox: when
  a member of its model has arrived, it joins the batch where it stands — its KV cache, what the cache
  holds, what is left of its prompt (or its last sampled token) as its prompt, its own sampler and logits
  processors, what is left of its output cap — and decodes on there exactly as it would have here.
- Everything else is the batch's: the same Member (detokenizer, DecodeLoop, mailbox), the same sampler and
  logits processors (a seeded sampler keeps its own key across the move; a grammar mask has consumed exactly
  the tokens before the one it is handed next), the same prompt-cache store at the end.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .batch import Member, _Generator

PREFILL_STEP = 2048  # prompt tokens read per chunk (mlx-lm's default)
FIRST_CHUNK = 32  # ... except the first: requests sent together (a client's parallel calls, sub-agents) arrive
#                   a few milliseconds apart, and a look after this short chunk (~25 ms on 2 cores with a ~50M
#                   model) sees them, so they are read together in the batch rather than one alone first.
#                   Reading a prompt in one more chunk costs next to nothing: prefill is compute-bound.


@dataclass
class Start:
    """Where a member starts: its KV cache and how many of its prompt tokens it already holds, its sampler and
    logits processors (guarded: see batch.py), its output cap."""
    kv: list
    cached: int
    sampler: Callable
    processors: list
    max_tokens: int


@dataclass
class Handover:
    """Where a lone member stands when it joins the batch: ``prompt`` still to read (the rest of its prompt, or
    its last sampled token), ``held`` the tokens its KV cache holds, ``max_tokens`` what is left of its cap."""
    prompt: list[int]
    held: list[int]
    max_tokens: int
    kv: list


def decode_alone(gen: "_Generator", member: "Member", start: Start, joined: Callable[[], bool]) -> Handover | None:
    """Decode ``member`` alone until it ends (None) or ``joined()`` says another member arrived (the Handover
    to insert into the batch). A member whose consumer left is stored and closed here."""
    import mlx.core as mx

    model, tokens, kv = gen.model, list(member.prepared.tokens), start.kv
    stream = gen.backend.stream
    with mx.stream(stream) if stream is not None else contextlib.nullcontext():
        done = start.cached
        while len(tokens) - 1 - done > 0:  # all but the last prompt token, chunk by chunk
            if member.box.stop.is_set():
                return member.leave(kv)
            if joined():
                return Handover(tokens[done:], tokens[:done], start.max_tokens, kv)
            n = min(FIRST_CHUNK if done == start.cached else PREFILL_STEP, len(tokens) - 1 - done)
            model(mx.array(tokens[done:done + n])[None], cache=kv)
            mx.eval([c.state for c in kv])
            mx.clear_cache()
            done += n
        step = Stepper(model, kv, tokens, start.sampler, start.processors)
        y = step(tokens[-1:])
        while True:
            if member.box.stop.is_set():
                return member.leave(kv)
            if joined():
                token = y.item()
                if _feed(member, token, kv):
                    return None
                held = tokens + member.generated[:-1]
                return Handover([token], held, start.max_tokens - len(member.generated), kv)
            nxt = step(y)  # queued before this token is read: the forward pass runs while it is handled
            if _feed(member, y.item(), kv):
                return None
            run = _forced_run(member, step)
            for token in run:
                if _feed(member, token, kv):
                    return None
            y = step(run) if run else nxt


def _forced_run(member: "Member", step: "Stepper") -> list[int]:
    """The tokens the member's grammar forces next, when there are at least two in a row: they are read in
    one forward pass instead of one pass each (a JSON document's keys and punctuation). The sampler still
    draws once per token (on one-hot distributions: the forced token), so a seeded request draws what it draws
    decoding token by token. The matcher is left before the run's last token, which the mask's next call
    consumes as usual."""
    mask = member.loop.grammar_mask
    if mask is None:
        return []
    started = time.perf_counter()
    budget = member.prepared.max_tokens - member.decoded
    run: list[int] = []
    forced = mask.forced()
    while forced is not None and len(run) < budget:
        run.append(forced)
        mask.advance(forced)
        forced = mask.forced()
    if run:
        mask.matcher.rollback(1)
    if len(run) == 1:  # a run of one saves nothing: the next regular step reads it
        run = []
    for token in run[1:]:  # the first was drawn already (the step that computed its mask)
        step.draw_forced(token)
    member.loop.grammar_mask_s += time.perf_counter() - started
    return run


class Stepper:
    """One decode step: the model on the input token(s), the member's logits processors over its token
    context, its sampler; the sampled token is evaluated asynchronously."""

    def __init__(self, model, kv: list, prompt: list[int], sampler, processors: list):
        import mlx.core as mx

        self.model, self.kv, self.sampler, self.processors = model, kv, sampler, processors
        self.context = mx.array(prompt[:-1], dtype=mx.int32) if processors else None

    def __call__(self, inputs: Any):
        import mlx.core as mx

        inputs = mx.array(inputs, dtype=mx.int32) if isinstance(inputs, list) else inputs
        logits = self.model(inputs[None], cache=self.kv)[:, -1, :]
        self.width = logits.shape[-1]
        if self.processors:
            self.context = mx.concatenate([self.context, inputs])
            for processor in self.processors:
                logits = processor(self.context, logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sampled = self.sampler(logprobs)
        mx.async_eval(sampled)
        return sampled

    def draw_forced(self, token: int) -> None:
        """The sampler's draw for a forced token (its random key moves on as for any token; never evaluated)."""
        import mlx.core as mx

        self.sampler(mx.where(mx.arange(self.width) == token, 0.0, -mx.inf)[None])


def _feed(member: "Member", token: int, kv: list) -> bool:
    """Hand one token to the member; True when that ended it (see ``Member.end``)."""
    if member.error is not None:
        raise member.error
    ended = member.feed(token)
    if ended is None:
        return False
    member.end(ended, kv)
    return True
