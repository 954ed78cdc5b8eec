"""How wide a batch step's drafts may make it: drafting in the batch pays row by row, or it is cut.

Rules:
- One batch pass feeds every row the widest row's width (batch.py pads the others), so a draft of k tokens
  costs the whole batch k more token slots: a fixed part (the weights read once, the step's own work) and a
  part per token slot computed, measured from the batch's own steps over the last ``WINDOW`` batch-only
  steps; until two widths have been seen, the proposed drafts are taken as they are, so the fit learns what
  a wider pass costs here (on a GPU a wider pass is nearly free, on a CPU it is not), and every ``EXPLORE``
  steps a wide pass is tried again.
- What a pass of a width costs is read off the batch's own timings (see ``_cost``).
- Each row verifying a draft brings its expected tokens: with p its policy's recent acceptance (accepted ÷
  drafted over its last verifies, with a prior of one accepted in two: policy.py), a draft cut to m tokens
  gives ``1 + p + … + p^m``; a row without a draft gives 1; a grammar's forced run gives its length and is
  never cut (its tokens are certain: already accepted).
- The step takes the width with most expected tokens per second; drafts longer than it are cut to it (a cut
  draft is verified exactly as any), and at width 1 no row verifies (it samples after its last token, as
  without drafting). So a row whose drafts are rarely accepted, in a batch where width is dear, stops
  widening it (and, accepting less than half, rests a while: ``paused``); rows copying at once draft on.
- Before that, a batch row expecting a draft reads its pending token at once only where the rows expecting
  one, drafting together, would pay (``pays``): a draft the step would cut costs the batch its pipelining.
- Only rank 0 plans (lockstep decoding): the timings never have to agree between ranks.
"""

from __future__ import annotations

import collections
import statistics
from typing import TYPE_CHECKING

from ..decode.plan import RowStep, Sample, Take, Verify

if TYPE_CHECKING:
    from ..decode.rows import Row

WINDOW = 64
EXPLORE = 32


class BatchWidth:
    def __init__(self):
        self.seen: collections.deque[tuple[int, float]] = collections.deque(maxlen=WINDOW)  # (slots, seconds)
        self.since_wide = 0
        self._fitted = None  # the cost function of the window as it stands (made again after each step)

    def observe(self, steps: tuple[RowStep, ...], seconds: float) -> None:
        """A batch-only step (``steps``: its rows' shapes) took ``seconds``."""
        width = max(map(width_of, steps), default=0)
        if width:
            self._fitted = None
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
        p = {i: _acceptance(rows[i]) for i in drafts}
        best, best_rate = top, -1.0
        for width in range(floor, top + 1):
            tokens = sum(_expected(p[s.row], min(drafts[s.row], width - 1)) if s.row in drafts
                         else len(s.tokens) if isinstance(s, Sample) else 1 for s in steps)
            rate = tokens / cost(len(steps) * width)
            if rate > best_rate:
                best, best_rate = width, rate
        return [_cut(s, best - 1) if isinstance(s, Verify) else s for s in steps]

    def pays(self, drafting: list["Row"], rows: int) -> bool:
        """Whether ``drafting`` (batch rows that expect a draft after their pending token), drafting together in
        a batch of ``rows``, are expected to widen it profitably (see the rules): else they stay pipelined, one
        token a pass, instead of reading their token at once for a draft the step would cut. True while the
        cost of a width is not known yet (the fit learns it from the wide passes it lets through)."""
        cost = self._cost()
        if cost is None or self.since_wide >= EXPLORE:
            return True
        ks = [max(1, row.speculator.policy.k()) for row in drafting]
        ps = [_acceptance(row) for row in drafting]
        base = rows / cost(rows)
        for width in range(2, max(ks) + 2):
            tokens = rows - len(drafting) + sum(_expected(p, min(k, width - 1)) for p, k in zip(ps, ks))
            if tokens / cost(rows * width) > base:
                return True
        return False

    def _cost(self):
        if self._fitted is None:
            self._fitted = (self._fit(),)
        return self._fitted[0]

    def _fit(self):
        """Seconds a pass of n token slots takes, as a function; None while fewer than two widths were seen.
        Each width's median time over the window (a median, so a step that also grew the cache's buffers or
        met another process's burst does not tilt it), straight lines between them (a pass is not linear in
        its slots: one token a row and two differ by more than two and three do), and past the widest seen
        the slope of a line through them all."""
        times: dict[int, list[float]] = collections.defaultdict(list)
        for slots, seconds in self.seen:
            times[slots].append(seconds)
        if len(times) < 2:
            return None
        points = sorted((slots, statistics.median(ts)) for slots, ts in times.items())
        n = len(points)
        mean_s = sum(x for x, _ in points) / n
        mean_t = sum(t for _, t in points) / n
        var = sum((x - mean_s) ** 2 for x, _ in points)
        slope = max(sum((x - mean_s) * (t - mean_t) for x, t in points) / var, 0.0)

        def cost(slots: int) -> float:
            if slots <= points[0][0]:
                return points[0][1]
            for (x0, t0), (x1, t1) in zip(points, points[1:]):
                if slots <= x1:
                    return t0 + (t1 - t0) * (slots - x0) / (x1 - x0)
            return points[-1][1] + slope * (slots - points[-1][0])

        return cost


def _acceptance(row: "Row") -> float:
    spec = row.speculator
    return spec.policy.acceptance() if spec is not None else 0.0


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


def paused(row: "Row") -> bool:
    """Whether a row whose draft was cut rests a while (its policy's cooldown): one accepting less than half
    of its drafts. One accepting more drafts again at once — its next draft may fall in a step where others
    draft too, and a wide pass pays."""
    return _acceptance(row) < 0.5
