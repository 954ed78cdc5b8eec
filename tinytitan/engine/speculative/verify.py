"""Verify a draft in one forward pass and fold the outcome back: the heart of speculative decoding.

Rules:
- A step's input is the token sampled last (not yet in the KV cache) and a draft of k tokens; one forward
  pass over those k + 1 tokens gives k + 1 rows of logits. Row i is what decoding one token at a time would
  have computed after the draft's first i tokens: the request's logits processors see exactly that token
  context (and a grammar mask consumes exactly those tokens), the sampler draws row i as it would draw that
  position (decode/lane.py ``Lane.samples``, sampling.py).
- The fold accepts the longest prefix of the draft that equals the rows' own samples, and then the row after
  it (the model's own token where the draft went wrong, or one more past a wholly accepted draft): every
  token given back is the model's own sample, so greedy output is token for token what decoding without a
  draft gives, and sampled output is drawn from the same distribution (mlx-lm's ``speculative_generate_step``
  accepts by the same rule).
- The KV cache is trimmed past the rejected draft tokens (a row's own cache: mlx-lm's public
  ``trim_prompt_cache``, step.py; the batch's: left as holes, decode/ragged.py) and the grammar matcher rolled back over them (llguidance's ``rollback``: the decoder's fold):
  both then stand where decoding one token at a time would stand, holding every given-back token but the last.
- Before the forward pass a draft is cut where the grammar would refuse it (``validate_tokens``: a token the
  mask forbids can never be accepted) and before any end-of-sequence token.
"""

from __future__ import annotations

from typing import Any, Sequence


def accepted_prefix(draft: Sequence[int], samples: Sequence[int]) -> int:
    """How many leading draft tokens equal the model's own samples (``samples`` has one row more)."""
    n = 0
    while n < len(draft) and samples[n] == draft[n]:
        n += 1
    return n


def usable_draft(draft: list[int], last: int, mask: Any = None, eos: Sequence[int] = ()) -> list[int]:
    """The part of ``draft`` worth verifying after ``last``: up to its first end-of-sequence token, and what a
    grammar ``mask`` (a GrammarMask, or None) would let through after ``last``. The mask has not consumed
    ``last`` yet (it does at its next call), unless it has not been called at all."""
    for i, token in enumerate(draft):
        if token in eos:
            draft = draft[:i]
            break
    if mask is None or not draft:
        return draft
    if mask.failed:
        return []
    if mask.started:
        ok = mask.matcher.validate_tokens([last, *draft]) - 1
    else:
        ok = mask.matcher.validate_tokens(draft)
    return draft[:max(ok, 0)]
