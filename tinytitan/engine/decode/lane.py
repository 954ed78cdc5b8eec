"""A row's decoding state on the device, wherever its KV cache lives (its own, or a row of the batch).

Rules:
- A lane is what the forward keeps per row besides the cache: how much of the prompt that cache holds
  (``read``), the token context its logits processors see (``context``: what the cache holds before the next
  token read, None without processors), the token sampled last and not read yet (``pending``: an mlx array
  whose evaluation is queued), the vocabulary width. It reads the row's hooks (sampler, processors) and tokens,
  and writes nothing on the row.
- The lane turns logits into samples exactly one way, whatever computed them (a row alone, the batch, a
  verify): processors over the context extended by the tokens read up to that position, then the row's own
  sampler on the normalised log-probabilities. So a row samples the same tokens alone, in the batch, or moved
  from one to the other mid-answer — with or without a draft — from the same logits (a wider pass may round
  the model's logits in their last bit: docs/speculative-decoding.md).
- A lane moves with its row between its own cache and the batch; nothing in it depends on where the cache is.
- A row that asks for log probabilities has them queued beside each sample, from the logits before its
  processors (``logprobs``: logprobs.py); the forward reads them with the tokens. One that asks for its prompt's
  has each prefill chunk reduced to them as it is read (``prompt_figures``), handed out after the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .logprobs import Queued

if TYPE_CHECKING:
    from .rows import Row


class Lane:
    def __init__(self, row: "Row"):
        import mlx.core as mx

        self.row = row
        self.read = row.read  # prompt tokens its cache holds
        # what its cache holds before the next token it reads (a row holding its last token: ``held``)
        context = row.held if row.generated else row.tokens[:-1]
        self.context = mx.array(context, dtype=mx.int32) if row.processors else None
        self.pending = None  # the token sampled last, not read yet
        self.width = 0
        top = row.prepared.logprobs
        self.logprobs = Queued(top) if top is not None else None  # its samples' figures, not read yet
        self.prompt_top = row.prompt_top  # its prompt tokens' alternatives, where their figures are asked
        self.prompt_figures: list = []  # the figures of the prompt tokens its prefill read, not handed out yet

    def sample(self, logits, inputs):
        """The row's sample from ``logits`` ([1, vocab]: the position after ``inputs``, the tokens just read,
        an int32 array); not evaluated here."""
        import mlx.core as mx

        self.width = logits.shape[-1]
        raw = logits
        processors = self.row.processors
        if processors:
            self.context = mx.concatenate([self.context, inputs])
            for processor in processors:
                logits = processor(self.context, logits)
        sampled = self.row.sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        if self.logprobs is not None:
            self.logprobs.add(raw, sampled)
        return sampled

    def samples(self, logits, inputs, fed: int):
        """A verify's samples: ``logits`` has one row per position from the last fed token on (``inputs`` are
        the ``fed`` known tokens and then the draft); position i's processors see the context extended by the
        inputs up to it. One sample per position, not evaluated here."""
        import mlx.core as mx

        self.width = logits.shape[-1]
        processors = self.row.processors
        if processors:
            rows = []
            for i in range(logits.shape[0]):
                ctx = mx.concatenate([self.context, inputs[:fed + i]])
                row = logits[i:i + 1]
                for processor in processors:
                    row = processor(ctx, row)
                rows.append(row)
            logits = mx.concatenate(rows) if len(rows) > 1 else rows[0]
        return self.row.sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))

    def verified(self, tokens: Sequence[int]) -> None:
        """The tokens a verify kept in the cache (its fed tokens and the accepted draft) join the context."""
        import mlx.core as mx

        if self.context is not None:
            self.context = mx.concatenate([self.context, mx.array(list(tokens), dtype=mx.int32)])

    def draw(self, token: int) -> None:
        """The sampler's draw for a forced token (its random key moves on as for any token; never evaluated)."""
        import mlx.core as mx

        self.row.sampler(mx.where(mx.arange(self.width) == token, 0.0, -mx.inf)[None])

    def take(self) -> int:
        """Its pending token, read now."""
        token, self.pending = self.pending.item(), None
        return token
