"""The two plain values of a decode step: the ``Plan`` the scheduler makes, the ``StepResult`` the forward returns.

Rules:
- A plan holds row ids, token ids and flags only — never an array, a cache or a callable — so it can be
  broadcast as a flat list of ints (``Plan.as_ints``/``from_ints``: what lockstep decoding sends).
- What one row does in one step, on its own cache or in the batch, is one of five shapes (``RowStep``), each
  saying all it means: ``Prefill`` (a chunk of its prompt, nothing sampled; a row alone only), ``Sample``
  (known tokens — its prompt's rest, its last token, or a grammar's forced run — then a token sampled after
  them, read by the next step unless ``now``), ``Next`` (its pending token read, the pass after it queued
  first: pipelined decoding; ``hold``: that pass's sample read at once too), ``Take`` (its pending token read
  with nothing queued after it: a draft follows), ``Verify`` (its last token and a draft in one pass, a sample
  at every position).
- A step result is what the forward did, as data: the tokens each row's fold reads now, where each stepped
  row's cache stands, which rows failed and why. The forward writes nothing on a row (a row's own hook that
  raises notes it on that row: rows.py); the fold (``Scheduler.fold``) applies the result, on every rank
  alike, and a row that fails in a step reads none of the tokens the step gave it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

PREFILL_STEP = 2048  # prompt tokens read per chunk (mlx-lm's default) while nothing else decodes
PREFILL_STEP_SHARED = 256  # ... while other rows decode: each of their tokens waits at most this long


@dataclass(frozen=True)
class Prefill:
    """A chunk of the row's prompt read into its cache; nothing sampled."""
    row: int
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Sample:
    """Known tokens read (its prompt's rest, or a forced run when ``forced``: the sampler draws once for each
    of ``tokens[1:]``), then a token sampled after them: queued (pipelined), or read at once when ``now`` (a
    read-ahead before joining the batch)."""
    row: int
    tokens: tuple[int, ...]
    forced: bool = False
    now: bool = False


@dataclass(frozen=True)
class Next:
    """Its pending token read (the fold reads it now), the pass after it queued before: one pipelined step;
    with ``hold`` that pass's sample is read now too (a batch row: a draft follows it)."""
    row: int
    hold: bool = False


@dataclass(frozen=True)
class Take:
    """Its pending token read with nothing queued after it: a draft follows it."""
    row: int


@dataclass(frozen=True)
class Verify:
    """Its last token (``tokens``) and a draft in one forward pass, a sample at every position; the accepted
    draft prefix and the model's own next token are read now."""
    row: int
    tokens: tuple[int, ...]
    drafts: tuple[int, ...]


RowStep = Union[Prefill, Sample, Next, Take, Verify]
SHAPES = (Prefill, Sample, Next, Take, Verify)  # a shape's tag in ``as_ints`` is its index here


@dataclass(frozen=True)
class Plan:
    """One step of the decoder, as plain data."""
    cancel: tuple[int, ...] = ()  # rows whose consumer left: out of the batch and ended before anything steps
    alone: tuple[RowStep, ...] = ()  # rows stepped on their own caches
    join: tuple[int, ...] = ()  # rows that move into the batch (their own cache with them), after those steps
    batch: tuple[RowStep, ...] = ()  # what each row in the batch (joined ones included) does in its one pass
    leave: tuple[int, ...] = ()  # rows that step out of the batch onto their own cache, before anything steps

    @property
    def tokens(self) -> int:
        """How many tokens its forward passes read, drafts included."""
        return sum(len(s.tokens) + len(s.drafts) if isinstance(s, Verify) else len(s.tokens)
                   if isinstance(s, (Prefill, Sample)) else 1 for s in (*self.alone, *self.batch))

    def as_ints(self) -> list[int]:
        """The plan as a flat list of ints (what lockstep decoding broadcasts)."""
        out = [len(self.cancel), *self.cancel, len(self.leave), *self.leave, len(self.join), *self.join]
        for steps in (self.alone, self.batch):
            out.append(len(steps))
            for s in steps:
                out += _step_ints(s)
        return out

    @classmethod
    def from_ints(cls, ints: list[int]) -> "Plan":
        it = iter(ints)

        def take() -> tuple[int, ...]:
            return tuple(next(it) for _ in range(next(it)))

        cancel, leave, join = take(), take(), take()
        alone = tuple(_int_step(it, take) for _ in range(next(it)))
        batch = tuple(_int_step(it, take) for _ in range(next(it)))
        return cls(cancel, alone, join, batch, leave)


def _step_ints(s: RowStep) -> list[int]:
    out = [SHAPES.index(type(s)), s.row]
    if isinstance(s, Prefill):
        out += [len(s.tokens), *s.tokens]
    elif isinstance(s, Sample):
        out += [int(s.forced), int(s.now), len(s.tokens), *s.tokens]
    elif isinstance(s, Verify):
        out += [len(s.tokens), *s.tokens, len(s.drafts), *s.drafts]
    elif isinstance(s, Next):
        out.append(int(s.hold))
    return out


def _int_step(it, take) -> RowStep:
    shape, row = SHAPES[next(it)], next(it)
    if shape is Prefill:
        return Prefill(row, take())
    if shape is Sample:
        forced, now = bool(next(it)), bool(next(it))
        return Sample(row, take(), forced, now)
    if shape is Take:
        return Take(row)
    if shape is Verify:
        tokens = take()
        return Verify(row, tokens, take())
    return Next(row, bool(next(it)))


@dataclass
class StepResult:
    """What one forward did (see the rules): the fold's only input besides the plan."""
    tokens: dict[int, tuple[int, ...]] = field(default_factory=dict)  # row -> tokens its fold reads now, in order
    read: dict[int, int] = field(default_factory=dict)  # row stepped alone -> prompt tokens its cache holds now
    pending: dict[int, bool] = field(default_factory=dict)  # row stepped -> a sampled token is still unread
    verified: dict[int, int] = field(default_factory=dict)  # row -> draft tokens its verify accepted
    failed: dict[int, BaseException] = field(default_factory=dict)  # row -> why it failed in this step
    # row that asks for log probabilities -> one entry per token in ``tokens`` (logprobs.Figures)
    logprobs: dict[int, tuple] = field(default_factory=dict)
    # row that asks for its prompt's log probabilities -> the figures of the prompt tokens its prefill read this
    # step (each the token after a position read), in order
    prompt_logprobs: dict[int, tuple] = field(default_factory=dict)
