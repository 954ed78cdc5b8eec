"""The batch: rows decoding together in one forward pass over one batch KV cache per layer.

Rules:
- The batch is the project's own loop over mlx-lm's public batch caches (``merge``, ``extend``, ``filter``,
  ``extract``; mlx-lm's ``BatchGenerator`` feeds a row one token a step and trims every row alike). A row joins
  with its own cache and its lane (lane.py) and leaves with them: what its cache holds and what it has sampled
  and not read are the same in the batch as on its own, so a row moves either way between two steps without
  reading anything again, drawing anything again, or stepping back.
- A row joins once its prompt is read but its last token, which its first pass in the batch reads with its
  first sample. In one step each row does what a row alone would (the shapes of plan.py): ``Next`` (its
  pending token fed, the next sampled — pipelined: the pass is queued before the pending token is read),
  ``Sample`` (known tokens fed: its last token, a grammar's forced run; a sample after them), ``Verify``
  (its last token and a draft, a sample at every position), ``Take`` (its pending token read, nothing fed).
- Rows read different numbers of tokens in one pass only where the cache can hold holes (ragged.py: every
  layer a plain KV cache). Otherwise every row feeds one token a step and the scheduler plans nothing wider.
- A row's samples come from its lane, exactly as alone. Rows that all use the shared greedy sampler without
  processors are sampled in one call; while they decode side by side (none joined, left or sampled alone since),
  the next pass feeds that call's [rows] array as it is and reads it in one read, not a slice and a read per
  row: on a fast device the host's per-row work is what a batch step pays for (bench_step.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .plan import Next, RowStep, Sample, Take, Verify
from .ragged import compact_if_holey, merge, ragged
from ..speculative.verify import accepted_prefix

if TYPE_CHECKING:
    from .lane import Lane


class Batch:
    def __init__(self, model, fresh_cache: list):
        self.model = model
        self.holey = ragged(fresh_cache)  # rows may read several tokens in a pass (see the rules)
        self.order: list[int] = []  # row ids, in the batch's row order
        self.holes: list[int] = []  # each row's holes in the cache (ragged.py), in the same order
        self.kv: list | None = None
        # the last pass's samples where every row was sampled together: (the [N] array, row id -> (index, the
        # row's pending slice of it)); rows still holding those slices feed and read them as one array
        self.together: tuple | None = None

    def __contains__(self, row_id: int) -> bool:
        return row_id in self.order

    def add(self, row_ids: list[int], caches: list[list]) -> None:
        """Rows join with their own caches (their lanes stay with the forward)."""
        if not row_ids:
            return
        joined = merge(caches, self.holey)
        if self.kv is None:
            self.kv = joined
        else:
            for mine, theirs in zip(self.kv, joined):
                mine.extend(theirs)
        self.order += row_ids
        self.holes += [0] * len(row_ids)

    def remove(self, row_id: int) -> list:
        """A row leaves: its own cache (its valid positions only). It is out of the batch even where its cache
        could not be taken out (the error is raised then): the others go on without it."""
        i = self.order.index(row_id)
        try:
            kv = [layer.extract(i) for layer in self.kv]
        finally:
            keep = [j for j in range(len(self.order)) if j != i]
            del self.order[i], self.holes[i]
            if keep:
                for layer in self.kv:
                    layer.filter(keep)
            else:
                self.kv = None
        return kv

    def clear(self) -> list[int]:
        """Every row out, caches dropped; the row ids that were in it."""
        gone, self.order, self.holes, self.kv, self.together = self.order, [], [], None, None
        return gone

    def step(self, steps: dict[int, RowStep], lanes: dict[int, "Lane"]) -> tuple[dict, dict]:
        """One pass for every row in the batch (``steps``: each row's shape). The tokens each row's fold reads
        now, and for a verify the draft tokens it accepted."""
        import mlx.core as mx

        order = self.order
        feeds = [self._feed(steps[i], lanes[i]) if i in steps else None for i in order]  # no step: it reads none
        width = max(len(f) if f is not None else 0 for f in feeds)
        # (a row with no step — it failed to leave, and is retired after the step — reads padding it never uses)
        assert self.holey or all(f is None or len(f) == width for f in feeds), "one token a row a pass"
        sampled: dict[int, object] = {}
        last, self.together = self.together, None
        if width:
            logits = self.model(self._inputs(feeds, width, last), cache=self.kv)
            if self._greedy_together(steps, lanes):  # one call for every row (see the rules)
                rows = logits[:, -1] if width == 1 else mx.stack([logits[b, len(f) - 1] for b, f in enumerate(feeds)])
                drawn = lanes[order[0]].row.sampler(rows - mx.logsumexp(rows, axis=-1, keepdims=True))
                for b, row_id in enumerate(order):
                    lanes[row_id].width = logits.shape[-1]
                    sampled[row_id] = drawn[b:b + 1]
                self.together = (drawn, {row_id: (b, sampled[row_id]) for b, row_id in enumerate(order)})
            else:
                for b, row_id in enumerate(order):
                    s, lane, fed = steps.get(row_id), lanes[row_id], feeds[b]
                    if isinstance(s, Verify):
                        sampled[row_id] = lane.samples(logits[b, len(s.tokens) - 1:len(fed)], fed, len(s.tokens))
                    elif fed is not None:
                        sampled[row_id] = lane.sample(logits[b:b + 1, len(fed) - 1], fed)
            mx.async_eval([*(self.together[:1] if self.together else ()), *sampled.values()])
        read = _Reader(last, lanes)
        tokens: dict[int, tuple[int, ...]] = {}
        verified: dict[int, int] = {}
        kept = []
        for b, row_id in enumerate(order):
            s, lane, fed = steps.get(row_id), lanes[row_id], feeds[b]
            n = len(fed) if fed is not None else 0
            if isinstance(s, Verify):
                samples = sampled[row_id].tolist()
                accepted = accepted_prefix(s.drafts, samples)
                lane.verified([*s.tokens, *s.drafts[:accepted]])
                tokens[row_id], verified[row_id] = tuple(samples[:accepted + 1]), accepted
                n -= len(s.drafts) - accepted
            elif isinstance(s, (Next, Take)):
                tokens[row_id] = (read.take(row_id),)
            if isinstance(s, Sample) and lane.read < len(lane.row.tokens):  # its prompt's last token, read here
                lane.read = len(lane.row.tokens)
            if row_id in sampled and not isinstance(s, Verify):
                lane.pending = sampled[row_id]
                if isinstance(s, Sample) and s.now:
                    tokens[row_id] = (lane.take(),)
                elif isinstance(s, Next) and s.hold:
                    tokens[row_id] += (lane.take(),)
            kept.append(n)
        if width and self.holey:  # every layer holds the same positions: the first one's holes serve all
            first = self.kv[0]
            first.keep(kept, width)
            for layer in self.kv[1:]:
                layer.offset, layer.valid = first.offset, first.valid
            self.holes = [h + width - k for h, k in zip(self.holes, kept)]
            rebuilt = compact_if_holey(self.kv, self.holes)
            if rebuilt is not None:
                self.kv, self.holes = rebuilt, [0] * len(order)
        return tokens, verified

    @staticmethod
    def _inputs(feeds: list, width: int, last: tuple | None):
        """The pass's input tokens, [rows, width]: where every row feeds its slice of the last pass's samples
        (all decoding, none moved), that array itself."""
        import mlx.core as mx

        if last is not None and width == 1 and len(feeds) == len(last[1]):
            if all(f is s for f, (_, s) in zip(feeds, last[1].values())):
                return last[0][:, None]
        return mx.stack([_padded(f, width) for f in feeds])

    @staticmethod
    def _feed(s: RowStep, lane: "Lane"):
        """The tokens a row reads in this pass (an int32 array), None when it reads none."""
        import mlx.core as mx

        if isinstance(s, Next):
            return lane.pending
        if isinstance(s, Take):
            return None
        if isinstance(s, Sample) and s.forced:
            for token in s.tokens[1:]:  # the draw for each forced token after the first (drawn already)
                lane.draw(token)
        tokens = [*s.tokens, *s.drafts] if isinstance(s, Verify) else list(s.tokens)
        return mx.array(tokens, dtype=mx.int32)

    def _greedy_together(self, steps: dict[int, RowStep], lanes: dict[int, "Lane"]) -> bool:
        """Every row samples with the shared greedy sampler, without processors or log probabilities, one sample
        after its tokens."""
        from mlx_lm.sample_utils import greedy_sampler

        return all(lanes[i].row.sampler is greedy_sampler and not lanes[i].row.processors
                   and lanes[i].logprobs is None and isinstance(steps.get(i), (Next, Sample)) for i in self.order)


class _Reader:
    """Rows' pending tokens read after the next pass is queued: those still holding their slice of the last
    pass's samples (``Batch.together``) read together, in one read of that array; any other, on its own."""

    def __init__(self, last: tuple | None, lanes: dict[int, "Lane"]):
        self.last, self.lanes, self.values = last, lanes, None

    def take(self, row_id: int) -> int:
        lane = self.lanes[row_id]
        at = self.last[1].get(row_id) if self.last is not None else None
        if at is None or lane.pending is not at[1]:
            return lane.take()
        if self.values is None:
            self.values = self.last[0].tolist()
        lane.pending = None
        return self.values[at[0]]


def _padded(feed, width: int):
    import mlx.core as mx

    if feed is None:
        return mx.zeros((width,), dtype=mx.int32)
    if len(feed) == width:
        return feed
    return mx.concatenate([feed, mx.zeros((width - len(feed),), dtype=mx.int32)])
