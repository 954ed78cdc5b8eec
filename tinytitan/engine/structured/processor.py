"""The mask: a per-request mlx-lm logits processor that lets through only tokens the grammar allows.

Rules:
- One ``GrammarMask`` per request (it owns its matcher); it works alone or as one member of a batch.
- The first call sees the prompt (nothing to consume); every later call first consumes the token sampled
  last, then masks: a token is allowed when its bytes extend the output within the grammar (also tokens
  that end inside a UTF-8 character or a JSON string); end-of-sequence only where the document is complete.
- The logits are not evaluated here (that would stall mlx-lm's pipelining): the forward pass is started
  (``async_eval``) and runs while the mask is computed from the sampled token.
- A mask already handed to mlx is handed again from a small bounded memo keyed by its bits (``MX_CACHE_BYTES``
  a request): a JSON document's positions repeat a few dozen masks (inside a string, after a key, a digit), so
  most tokens skip building a vocabulary-wide array.
- ``seconds`` is the mask's own time (consuming tokens, computing masks, handing them to mlx), never the
  wait for the sampled token its call also holds: that wait is the forward pass's.
- A matcher that refuses a token it had allowed (or cannot go on) fails the generation (``GrammarFailed``,
  raised from the processor: the decoder reports it as the protocol's server error, a batch fails only
  that member) — never an end-of-sequence that would pass a broken document off as a ``stop``.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ...memo import BoundedMemo
from .compile import CompiledGrammar

log = logging.getLogger("tinytitan.structured")

MX_CACHE_BYTES = 8 << 20  # the mlx masks a request keeps for reuse (a vocabulary-wide boolean row each)


class GrammarFailed(RuntimeError):
    """The grammar matcher could not go on: the output can no longer be promised to match."""


def failure_message(token: int | None, error: str | None) -> str:
    """What a client is told of a matcher that could not go on: llguidance's first line (its message goes on
    with the whole compiled grammar, kilobytes the client never wrote), and for its item limit what to change."""
    first = (error or "refused").strip().splitlines()[0][:300]
    if "too many items" in first.lower():
        return (f"the output grammar is too ambiguous to enforce this far (token {token}; the matcher's item limit): "
                "a schema whose every document must hold a deeper one of its own kind (an object that requires "
                "itself through a choice), or, in a custom tool's grammar, a pattern that can end at almost any "
                "character, such as '.*a', followed by a terminal that begins with a newline, tab or quote, is "
                "matched character by character inside the call's JSON string, and every character is a choice "
                "point; bound its repeats or exclude that character")
    if token is None:
        return f"the output grammar's matcher failed before the first token: {first}"
    return f"the output grammar's matcher failed (token {token}): {first}"


class GrammarMask:
    def __init__(self, compiled: CompiledGrammar):
        from llguidance.numpy import allocate_token_bitmask

        self.matcher = compiled.matcher()
        self.vocab_size = compiled.vocab_size
        self.bitmask = allocate_token_bitmask(1, self.vocab_size)
        self.eos = list(compiled.tokenizer.eos_tokens)
        self.started = False
        self.failed = False
        self.seconds = 0.0  # its own work (see the rules)
        self.minus_inf: dict = {}  # dtype -> mlx scalar (``refused``)
        self.handed: BoundedMemo[tuple[int, bytes], object] | None = None  # (width, bits) -> mlx row (``_bits_mx``)

    def consume(self, token: int) -> None:
        if not self.matcher.consume_token(token) or self.matcher.is_error():
            self._fail(token, f"refused token {token} it had allowed")

    def _fail(self, token: int | None, what: str):
        """The matcher cannot go on (see the rules): this mask fails its generation."""
        self.failed = True
        error = self.matcher.get_error()
        log.error("grammar matcher %s: %s", what, error)
        raise GrammarFailed(failure_message(token, error))

    def __call__(self, tokens, logits):
        import mlx.core as mx

        if self.started:
            mx.async_eval(logits)  # the forward pass runs while the mask is computed
            token = int(tokens[-1].item())  # (the wait for the sampled token: not the mask's time)
        started = time.perf_counter()
        try:
            last = None
            if self.started:
                self.consume(token)
                last = token
            self.started = True
            return mx.where(self.allowed_mx(logits.shape[-1], last), logits, self.refused(logits.dtype))
        finally:
            self.seconds += time.perf_counter() - started

    def refused(self, dtype):
        """The logit a refused token gets (-inf of the logits' dtype), made once per dtype."""
        import mlx.core as mx

        value = self.minus_inf.get(dtype)
        if value is None:
            value = self.minus_inf[dtype] = mx.array(-np.inf, dtype=dtype)
        return value

    # -- forced tokens (a row's proposer reads a run of them in one forward pass: rows.py) ---------------------
    def forced(self) -> int | None:
        """The token the last computed mask allows, when it allows exactly one and that is not
        end-of-sequence (None otherwise): sampling from that mask can only give this token."""
        if self.failed:
            return None
        words = self.bitmask[0].view(np.uint32)
        hit = np.flatnonzero(words)
        if len(hit) != 1:
            return None
        word = int(words[hit[0]])
        if word & (word - 1):
            return None
        token = int(hit[0]) * 32 + word.bit_length() - 1
        return None if token in self.eos else token

    def advance(self, token: int) -> None:
        """Consume a forced token and compute the next mask (what the next call would do, without logits)."""
        from llguidance.numpy import fill_next_token_bitmask

        started = time.perf_counter()
        try:
            self.consume(token)
            self.fill(token)
        finally:
            self.seconds += time.perf_counter() - started

    def allowed_mx(self, width: int, token: int | None = None):
        """The mask as an mlx boolean row of ``width``."""
        self.fill(token)
        return self._bits_mx(width)

    def fill(self, token: int | None) -> None:
        """Compute the next mask. A matcher that computing it put in its error state (a grammar with no way
        on: a schema reference that resolves only to itself) has left only end-of-sequence in the mask; that
        is a failure, never an end that would pass a broken (or empty) document off as complete."""
        if self.failed:
            return
        from llguidance.numpy import fill_next_token_bitmask

        fill_next_token_bitmask(self.matcher, self.bitmask)
        if self.matcher.is_error():
            self._fail(token, f"cannot go on after token {token}")

    def _bits_mx(self, width: int):
        """The bitmask computed last, as an mlx boolean row of ``width``: its 32-bit words unpacked by numpy
        (little-endian bits: token i is bit i; a few microseconds at a 150k vocabulary, half what expanding them
        in mlx's graph costs), or the row made for the same bits before (see the rules)."""
        import mlx.core as mx

        if self.failed:
            allowed = np.zeros(width, dtype=bool)
            allowed[[e for e in self.eos if e < width]] = True
            return mx.array(allowed)
        if self.handed is None:  # (bounded by the rows' width, known at the first)
            self.handed = BoundedMemo(max(1, MX_CACHE_BYTES // max(width, 1)))
        return self.handed.recall((width, self.bitmask.tobytes()), lambda: self._row(width))

    def _row(self, width: int):
        """The bitmask computed last as a new mlx boolean row of ``width``."""
        import mlx.core as mx

        bits = np.unpackbits(self.bitmask[0].view(np.uint8), bitorder="little").view(bool)
        if bits.shape[0] < width:
            bits = np.concatenate([bits, np.zeros(width - bits.shape[0], dtype=bool)])
        return mx.array(bits[:width])
