"""The two plain values of a decode step: the ``Plan`` the scheduler makes, the ``StepResult`` the forward returns.

Rules:
- A plan holds row ids, token ids and flags only — never an array, a cache or a callable — so it can be
  broadcast as a flat list of ints (``Plan.as_ints``/``from_ints``: what lockstep decoding sends).
- What one row does on its own cache in one step is one of five shapes (``RowStep``), each saying all it
  means: ``Prefill`` (a chunk of its prompt, nothing sampled), ``Sample`` (known tokens — its prompt's rest
  or a grammar's forced run — then a token sampled after them, read by the next step unless ``now``),
  ``Next`` (its pending token read, the pass after it queued first: pipelined decoding), ``Take`` (its
  pending token read with nothing queued after it: it joins the batch, or ``hold`` — a draft follows),
  ``Verify`` (its last token and a draft in one pass, a sample at every position).
- A step result is what the forward did, as data: the tokens each row's fold reads now, where each stepped
  row's cache stands, which rows failed and why. The forward writes nothing on a row; the fold (``Scheduler
  .fold``) applies the result, on every rank alike.
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
    """Its pending token read (the fold reads it now), the pass after it queued before: one pipelined step."""
    row: int


@dataclass(frozen=True)
class Take:
    """Its pending token read with nothing queued after it: it joins the batch next, or (``hold``) stays on
    its own cache with a draft to follow."""
    row: int
    hold: bool = False


@dataclass(frozen=True)
class Verify:
    """Its last token (``tokens``) and a draft in one forward pass, a sample at every position; the accepted
    draft prefix and the model's own next token are read now."""
    row: int
    tokens: tuple[int, ...]
    drafts: tuple[int, ...]


RowStep = Union[Prefill, Sample, Next, Take, Verify]
SHAPES = (Prefill, Sample, Next, Take, Verify)  # a shape's tag in ``as_ints`` is its index here


def leaves_own_cache(s: RowStep) -> bool:
    """Whether the row stops stepping on its own cache after ``s`` (it joins the batch next)."""
    return (isinstance(s, Sample) and s.now) or (isinstance(s, Take) and not s.hold)


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
            out += [SHAPES.index(type(s)), s.row]
            if isinstance(s, Prefill):
                out += [len(s.tokens), *s.tokens]
            elif isinstance(s, Sample):
                out += [int(s.forced), int(s.now), len(s.tokens), *s.tokens]
            elif isinstance(s, Take):
                out.append(int(s.hold))
            elif isinstance(s, Verify):
                out += [len(s.tokens), *s.tokens, len(s.drafts), *s.drafts]
        return out

    @classmethod
    def from_ints(cls, ints: list[int]) -> "Plan":
        it = iter(ints)

        def take() -> tuple[int, ...]:
            return tuple(next(it) for _ in range(next(it)))

        cancel, leave, join, batch, prefill = take(), take(), take(), bool(next(it)), next(it)
        alone: list[RowStep] = []
        for _ in range(next(it)):
            shape, row = SHAPES[next(it)], next(it)
            if shape is Prefill:
                alone.append(Prefill(row, take()))
            elif shape is Sample:
                forced, now = bool(next(it)), bool(next(it))
                alone.append(Sample(row, take(), forced, now))
            elif shape is Take:
                alone.append(Take(row, bool(next(it))))
            elif shape is Verify:
                tokens = take()
                alone.append(Verify(row, tokens, take()))
            else:
                alone.append(Next(row))
        return cls(cancel, tuple(alone), join, batch, leave=leave, prefill=prefill)


@dataclass
class StepResult:
    """What one forward did (see the rules): the fold's only input besides the plan."""
    tokens: dict[int, tuple[int, ...]] = field(default_factory=dict)  # row -> tokens its fold reads now, in order
    read: dict[int, int] = field(default_factory=dict)  # row -> prompt tokens its own cache holds now
    pending: dict[int, bool] = field(default_factory=dict)  # row stepped alone -> a sampled token is still unread
    verified: dict[int, int] = field(default_factory=dict)  # row -> draft tokens its verify accepted
    failed: dict[int, BaseException] = field(default_factory=dict)  # row -> why it failed in this step
    decoding: tuple[int, ...] = ()  # batch rows whose prompt was read this step: they decode from now on
    left: tuple[int, ...] = ()  # rows that stepped out of the batch (``Plan.leave``: those that could)
    staying: tuple[int, ...] = ()  # rows asked to leave the batch whose cache cannot: they stay in it
