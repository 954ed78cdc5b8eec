"""How wide a batch step's drafts may make it: drafting in the batch pays row by row, or it is cut.

Rules:
- One batch pass feeds every row the widest row's width (batch.py pads the others), so a draft of k tokens
  costs the whole batch k more token slots. A pass costs about ``a + b × rows × width``: a fixed part (the
  weights read once, the step's own work) and a part per token slot computed. Both are fitted from the
  batch's own steps (least squares over the last ``WINDOW`` batch-only steps); until two widths have been
  seen, the proposed drafts are taken as they are, so the fit learns what a wider pass costs here (on a GPU a
  wider pass is nearly free, on a CPU it is not), and every ``EXPLORE`` steps a wide pass is tried again.
- Each row verifying a draft brings its expected tokens: with p its speculator's acceptance so far (accepted ÷
  drafted, with a prior of one accepted in two), a draft cut to m tokens gives ``1 + p + … + p^m``; a row
  without a draft gives 1; a grammar's forced run gives its length and is never cut (its tokens are
  certain: already accepted).
- The step takes the width with most expected tokens per second; drafts longer than it are cut to it (a cut
  draft is verified exactly as any), and at width 1 no row verifies (it samples after its last token, as
  without drafting). So a row whose drafts are rarely accepted, in a batch where width is dear, stops
  widening it; a copying row in a batch where width is cheap drafts on.
- Only rank 0 plans (lockstep decoding): the timings never have to agree between ranks.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from ..decode.plan import RowStep, Sample, Take, Verify

if TYPE_CHECKING:
    from ..decode.rows import Row

WINDOW = 64
EXPLORE = 128


class BatchWidth:
    def __init__(self):
        self.seen: collections.deque[tuple[int, float]] = collections.deque(maxlen=WINDOW)  # (slots, seconds)
        self.since_wide = 0

    def observe(self, steps: tuple[RowStep, ...], seconds: float) -> None:
        """A batch-only step (``steps``: its rows' shapes) took ``seconds``."""
        width = max(map(width_of, steps), default=0)
        if width:
            self.seen.append((len(steps) * width, seconds))
            self.since_wide = 0 if width > 1 else self.since_wide + 1

    def fit(self, steps: list[RowStep], rows: dict[int, "Row"]) -> list[RowStep]:
        """The batch's steps with drafts cut to the width that pays (see the rules)."""
        drafts = {s.row: len(s.drafts) for s in steps if isinstance(s, Verify)}
        if not drafts:
            return steps
        floor = max((len(s.tokens) for s in steps if isinstance(s, Sample)), default=1)
        top = max(floor, max(drafts.values()) + 1)
        cost = self._cost()
        if cost is None or self.since_wide >= EXPLORE:
            return steps
        a, b = cost
        p = {i: _acceptance(rows[i]) for i in drafts}
        best, best_rate = top, -1.0
        for width in range(floor, top + 1):
            tokens = sum(_expected(p[s.row], min(drafts[s.row], width - 1)) if s.row in drafts
                         else len(s.tokens) if isinstance(s, Sample) else 1 for s in steps)
            rate = tokens / (a + b * len(steps) * width)
            if rate > best_rate:
                best, best_rate = width, rate
        return [_cut(s, best - 1) if isinstance(s, Verify) else s for s in steps]

    def _cost(self) -> tuple[float, float] | None:
        """``(a, b)`` fitted over the window; None while fewer than two widths were seen."""
        if len({s for s, _ in self.seen}) < 2:
            return None
        n = len(self.seen)
        mx = sum(s for s, _ in self.seen) / n
        my = sum(t for _, t in self.seen) / n
        var = sum((s - mx) ** 2 for s, _ in self.seen)
        b = max(sum((s - mx) * (t - my) for s, t in self.seen) / var, 0.0)
        a = max(my - b * mx, 1e-6)
        return a, b


def _acceptance(row: "Row") -> float:
    spec = row.speculator
    return (spec.accepted + 1) / (spec.drafted + 2) if spec is not None else 0.0


def _expected(p: float, m: int) -> float:
    return 1 + sum(p ** j for j in range(1, m + 1))


def _cut(s: Verify, k: int) -> RowStep:
    if k >= len(s.drafts):
        return s
    if k <= 0:
        return Sample(s.row, s.tokens)
    return Verify(s.row, s.tokens, s.drafts[:k])


def width_of(s: RowStep) -> int:
    """The tokens a row feeds in one batch pass."""
    if isinstance(s, Verify):
        return len(s.tokens) + len(s.drafts)
    if isinstance(s, Sample):
        return len(s.tokens)
    return 0 if isinstance(s, Take) else 1
