"""A lone request decoded with drafts: prefill, then verify steps until the end of the turn or the cap.

Rules:
- The prompt (past what the KV cache already holds) is read in chunks, all but its last token; every step
  after that is one ``Verifier`` step over the token sampled last and whatever the proposer drafts (nothing:
  an ordinary one-token step).
- The draft length comes from the request's ``DraftPolicy`` (adaptive k, the off-switch), cut to what the
  output cap leaves (the step's own token counts too) and to what the grammar allows.
- Each given-back token is yielded with whether the draft guessed it. A consumer that stops early (a stop
  string, a client that left) closes the generator; the cache is then trimmed to hold the tokens yielded
  but the last, exactly what decoding one token at a time leaves behind.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from .policy import DraftPolicy
from .verify import Verifier, usable_draft

PREFILL_STEP = 2048


def prefill(model, kv: list, tokens: Sequence[int], step: int = PREFILL_STEP) -> None:
    """Read ``tokens`` into ``kv`` in chunks of ``step``."""
    import mlx.core as mx

    for i in range(0, len(tokens), step):
        model(mx.array(list(tokens[i:i + step]))[None], cache=kv)
        mx.eval([c.state for c in kv])
        mx.clear_cache()


def speculative_decode(model, kv: list, prompt: Sequence[int], cached: int, sampler, proposer,
                       policy: DraftPolicy | None = None, processors: Sequence = (), mask=None,
                       eos: Sequence[int] = (), max_tokens: int = 256) -> Iterator[tuple[int, bool]]:
    """Tokens of a lone request, each with whether it came from an accepted draft token. ``kv`` holds the first
    ``cached`` tokens of ``prompt``; ``proposer`` (``extend``, ``propose``) already holds the prompt."""
    policy = policy or DraftPolicy()
    prompt = list(prompt)
    prefill(model, kv, prompt[cached:-1])
    verifier = Verifier(model, kv, prompt[:-1], sampler, processors, mask)
    last, made, unused = prompt[-1], 0, 0
    try:
        while made < max_tokens:
            k = min(policy.k(), max_tokens - made - 1)
            draft = usable_draft(proposer.propose(k), last, mask, eos) if k > 0 else []
            samples = verifier.forward(last, draft)
            tokens, n = verifier.fold(samples.tolist())
            if draft:
                policy.record(len(draft), n)
            else:
                policy.skipped()
            proposer.extend(tokens)
            unused = len(tokens)
            for i, token in enumerate(tokens):
                unused -= 1
                made += 1
                yield token, i < n
                if token in eos or made >= max_tokens:
                    return
            last = tokens[-1]
    finally:
        verifier.give_back(unused)
