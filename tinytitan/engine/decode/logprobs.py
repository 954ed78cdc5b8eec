"""Token log probabilities: for a row whose request asks (``Prepared.logprobs``: how many alternatives, 0 for the
chosen token's alone), each generated token's log probability and the likeliest tokens at its position.

Rules:
- The distribution is the model's own: the log-softmax of the logits the forward pass computed for that
  position, before the row's logits processors (repetition and presence penalties, ``logit_bias``, a grammar's
  mask) and before temperature, top-p, top-k and min-p (vLLM's default, ``raw_logprobs``). So the figures
  say what the model thinks, the same whatever the sampling settings; the chosen token is the one sampled
  (drawn from the processed distribution), and under a grammar an alternative the mask forbade may be listed.
- They are computed on the model thread from the very logits the token was sampled from, in the lane
  (lane.py), as lazy arrays queued beside the sample: only rows that ask pay (a log-softmax, one gather and
  one top-k over the vocabulary for that row), read when the forward reads the token (step.py).
- A row that asks samples every token itself, one per position: it does not draft (speculative decoding is off
  for it: rows.py) and reads its grammar's forced tokens one at a time (no forced runs), so each token read
  has exactly one sample, and so one distribution, behind it.
- The prompt's own tokens (``ChatRequest.prompt_logprobs``, legacy Completions' ``echo``): a row that asks reads
  its whole prompt itself (no cached prefix: a cached prefix has no logits; base.py ``Backend.start``), and each
  prefill chunk's logits are reduced at once (``prompt_figures``) to each next prompt token's log probability
  and its alternatives — the same log-softmax as a generated token's — before the next chunk is read: never a
  [prompt x vocab] array beyond one chunk's. The prompt's last token has no figures of its own here (its
  logits are the first generated token's). Sent as one ``PromptLogprobs`` event once the prompt is read.
- Every rank of a group computes them alike; only rank 0's row reports (a follower's loop sends nothing), and
  nothing here changes what is sampled, so no rank diverges.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from ...events import PromptLogprobs, TokenLogprob

# one token's figures as the forward hands them to the fold (StepResult.logprobs): its log probability and the
# likeliest (token id, log probability) pairs, likeliest first
Figures = tuple[float, tuple[tuple[int, float], ...]]


class Queued:
    """The figures of a lane's samples not read yet, in the order they were drawn (lazy mlx arrays)."""

    def __init__(self, top: int):
        self.top = top
        self.queue: deque = deque()

    def add(self, logits, sampled) -> None:
        """The figures of the sample ``sampled`` ([1] token) drawn from ``logits`` ([1, vocab], unprocessed);
        queued for evaluation with the sample."""
        import mlx.core as mx

        logits = logits.astype(mx.float32)
        lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        chosen = mx.take_along_axis(lp, sampled.reshape(1, 1).astype(mx.int32), axis=-1)[0]
        arrays = [chosen]
        if self.top:
            k = min(self.top, lp.shape[-1])
            ids = mx.argpartition(-lp, kth=k - 1, axis=-1)[0, :k]
            arrays += [ids, lp[0, ids]]
        mx.async_eval(arrays)
        self.queue.append(arrays)

    def read(self, n: int) -> tuple[Figures, ...]:
        """The figures of the next ``n`` tokens read (the oldest queued)."""
        out = []
        for _ in range(n):
            arrays = self.queue.popleft()
            chosen = float(arrays[0].item())
            top: tuple[tuple[int, float], ...] = ()
            if len(arrays) > 1:
                top = tuple(sorted(zip(arrays[1].tolist(), arrays[2].tolist()), key=lambda p: (-p[1], p[0])))
            out.append((chosen, top))
        return tuple(out)


def prompt_top(prepared) -> int | None:
    """How many alternatives a row's prompt tokens are listed with (None: their figures are not asked; a group
    follower's row, which has no request, has rank 0's from its message and reports none: follower.py)."""
    req = getattr(prepared, "req", None)
    return req.prompt_logprobs if req is not None else None


SLICE = 256  # prompt positions reduced at once: a float32 log-softmax of this many rows at a time


def prompt_figures(logits, targets, top: int) -> list[Figures]:
    """The figures of ``targets`` (token ids), the tokens that follow each position of ``logits`` ([T, vocab]:
    a prefill chunk's, unprocessed): evaluated here, so the chunk's logits can go before the next is read."""
    import mlx.core as mx

    out: list[Figures] = []
    for at in range(0, len(targets), SLICE):
        rows = logits[at:at + SLICE].astype(mx.float32)
        lp = rows - mx.logsumexp(rows, axis=-1, keepdims=True)
        ids = mx.array(list(targets[at:at + SLICE]), dtype=mx.int32)[:, None]
        arrays = [mx.take_along_axis(lp, ids, axis=-1)[:, 0]]
        if top:
            best = mx.argpartition(-lp, kth=min(top, lp.shape[-1]) - 1, axis=-1)[:, :min(top, lp.shape[-1])]
            arrays += [best, mx.take_along_axis(lp, best, axis=-1)]
        mx.eval(arrays)
        chosen = arrays[0].tolist()
        tops = list(zip(arrays[1].tolist(), arrays[2].tolist())) if top else [((), ())] * len(chosen)
        for c, (i, v) in zip(chosen, tops):
            out.append((c, tuple(sorted(zip(i, v), key=lambda p: (-p[1], p[0])))))
    return out


def prompt_logprobs(tokenizer, tokens, figures) -> PromptLogprobs:
    """The event for a prompt of ``tokens`` read with ``figures`` (one per token after the first)."""
    first = TokenLogprob(*_piece(tokenizer, tokens[0]), None)  # type: ignore[arg-type]  (nothing before it)
    rest = (token_logprob(tokenizer, t, f) for t, f in zip(tokens[1:], figures))
    return PromptLogprobs(tokenizer.decode(list(tokens)), (first, *rest))


def token_logprob(tokenizer, token: int, figures: Figures) -> TokenLogprob:
    """The event's value for a token read with ``figures``: each token's text and bytes from the tokenizer."""
    chosen, top = figures
    return TokenLogprob(*_piece(tokenizer, token), chosen,
                        tuple(TokenLogprob(*_piece(tokenizer, i), lp) for i, lp in top))


def _piece(tokenizer, token: int) -> tuple[str, tuple[int, ...]]:
    return tokenizer.decode([token]), token_bytes(tokenizer, token)


def token_bytes(tokenizer, token: int) -> tuple[int, ...]:
    """A token's own bytes: a byte-level BPE vocabulary's entry mapped back through GPT-2's byte alphabet, a
    SentencePiece byte token's ``<0xNN>``, else its decoded text's UTF-8."""
    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer

    detok = getattr(tokenizer, "detokenizer", None)
    piece = tokenizer.convert_ids_to_tokens(token) if hasattr(tokenizer, "convert_ids_to_tokens") else None
    if isinstance(piece, str) and piece not in getattr(tokenizer, "all_special_tokens", ()):
        if isinstance(detok, BPEStreamingDetokenizer):
            table = _byte_decoder()
            if all(c in table for c in piece):
                return tuple(table[c] for c in piece)
        elif isinstance(detok, SPMStreamingDetokenizer):
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                return (int(piece[3:5], 16),)
            return tuple(piece.replace("\u2581", " ").encode())
    return tuple(tokenizer.decode([token]).encode())


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte (``bytes_to_unicode``), inverted."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}
