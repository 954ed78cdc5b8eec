"""A batch KV cache whose rows may read different numbers of tokens in one forward pass: mlx-lm's
``BatchKVCache`` with holes.

Rules:
- One forward pass feeds every batch row the same width ``L`` (the widest row's tokens: a draft to verify, a
  grammar's forced run); a row with fewer tokens is padded on the right. Its padding, and the draft tokens a
  verify rejected, are written into the cache like any token. They become **holes**: positions the attention
  mask hides from every later query (``valid``), and that no longer count in the row's ``offset`` (so RoPE
  positions stay those of decoding one token at a time). Causality hides a row's right padding from its own
  real tokens in the pass itself.
- Nothing is moved to close a hole (a roll of the whole cache every step would copy all of it); a row leaving
  the batch takes only its valid positions (``extract``), and the batch compacts itself (``compact``) when
  holes pass a share of its length.
- Only mlx-lm's public cache API is used: the parent's methods, its ``left_padding``/``offset`` arrays and
  ``size()``; the holes are this class's own ``valid`` array ([rows, size()], bool; None: no holes).
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import BatchKVCache, KVCache

HOLES_SHARE = 0.25  # compact once holes are this share of the batch's length (and at least ``HOLES_MIN``)
HOLES_MIN = 64


def _left_pad(valid: mx.array, n: int) -> mx.array:
    return mx.concatenate([mx.ones((valid.shape[0], n), dtype=mx.bool_), valid], axis=1) if n else valid


class RaggedKVCache(BatchKVCache):
    valid: mx.array | None = None

    @classmethod
    def merge(cls, caches) -> "RaggedKVCache":
        merged = super().merge(caches)
        return merged if type(merged) is cls else cls([0] * len(caches))  # all empty: the parent's own class

    def _valid(self) -> mx.array:
        return self.valid if self.valid is not None else mx.ones((self.offset.shape[0], self.size()), dtype=mx.bool_)

    # -- rows in and out ----------------------------------------------------------------------------------
    def extend(self, other: "RaggedKVCache") -> None:
        a, b = self.size(), other.size()
        holes = self.valid is not None or getattr(other, "valid", None) is not None
        mine, theirs = (self._valid(), other._valid()) if holes else (None, None)
        super().extend(other)
        if holes:
            top = max(a, b)
            self.valid = mx.concatenate([_left_pad(mine, top - a), _left_pad(theirs, top - b)], axis=0)

    def filter(self, batch_indices) -> None:
        shift = min(self.left_padding[mx.array(batch_indices)].tolist()) if self.valid is not None else 0
        super().filter(batch_indices)
        if self.valid is not None:
            self.valid = self.valid[mx.array(batch_indices)][:, shift:]

    def extract(self, idx: int) -> KVCache:
        if self.valid is None:
            return super().extract(idx)
        padding = self.left_padding.tolist()[idx]
        keep = [p for p, ok in enumerate(self.valid[idx].tolist()) if ok and p >= padding]
        cache = KVCache()
        where = mx.array(keep, dtype=mx.int32)
        keys, values = self.keys_and_values()
        cache.keys = mx.contiguous(mx.take(keys[idx:idx + 1], where, axis=2))
        cache.values = mx.contiguous(mx.take(values[idx:idx + 1], where, axis=2))
        cache.offset = len(keep)
        return cache

    def trim(self, n: int) -> int:
        n = super().trim(n)
        if self.valid is not None:
            self.valid = self.valid[:, :self.size()]
        return n

    # -- the step -----------------------------------------------------------------------------------------
    def make_mask(self, N: int, return_array: bool = False, **kwargs):
        if self.valid is None:
            return super().make_mask(N, return_array=return_array, **kwargs)
        mask = create_causal_mask(N, offset=self.size(), left_padding=self.left_padding, **kwargs)
        seen = mx.concatenate([self.valid, mx.ones((self.valid.shape[0], N), dtype=mx.bool_)], axis=1)
        return mask & seen[:, None, None, :]

    def keep(self, kept: list[int], width: int) -> None:
        """After a pass of ``width`` tokens a row: row i keeps its first ``kept[i]`` of them, the rest are holes."""
        if all(k == width for k in kept):
            if self.valid is not None:
                self.valid = mx.concatenate([self.valid, mx.ones((len(kept), width), dtype=mx.bool_)], axis=1)
            return
        before = self._valid()[:, :self.size() - width]
        kept_a = mx.array(kept)
        self.offset = self.offset - (width - kept_a)
        self.valid = mx.concatenate([before, mx.arange(width)[None] < kept_a[:, None]], axis=1)

    def holes(self) -> int:
        """Positions hidden as holes in the row that has most (0 without holes)."""
        if self.valid is None:
            return 0
        return int((~self.valid).sum(axis=1).max().item())


def ragged(layers: list) -> bool:
    """Whether a model's cache (a fresh ``make_prompt_cache``) lets batch rows read several tokens in a pass:
    every layer a plain ``KVCache`` (a sliding window or a recurrent state cannot hold holes)."""
    return bool(layers) and all(type(c) is KVCache for c in layers)


def merge(layers_of_rows: list[list], holey: bool) -> list:
    """The rows' own caches (one list of layers per row) as one batch cache per layer."""
    if holey:
        return [RaggedKVCache.merge([row[i] for row in layers_of_rows]) for i in range(len(layers_of_rows[0]))]
    return [row_layer.merge([row[i] for row in layers_of_rows])
            for i, row_layer in enumerate(layers_of_rows[0])]


def compact_if_holey(kv: list, holes: list[int]) -> list | None:
    """The batch cache rebuilt without holes when they pass their share (see the rules); None: kept as it is.
    ``holes``: each row's count, kept by the caller in Python (``RaggedKVCache.holes`` would wait for the
    device, in every step)."""
    first = kv[0]
    if not isinstance(first, RaggedKVCache) or first.valid is None:
        return None
    most = max(holes, default=0)
    if most < HOLES_MIN or most < HOLES_SHARE * first.size():
        return None
    per_row = [[layer.extract(i) for layer in kv] for i in range(len(holes))]
    return merge(per_row, True)
