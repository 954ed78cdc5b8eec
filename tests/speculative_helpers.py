"""Speculative decoding's test helpers: a text worth copying (prompt lookup drafts from it) and mlx-lm's own
one-token-at-a-time decode, which stops at the ends of turn it is given."""

from __future__ import annotations


COPY_TEXT = ("def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n\n" * 2)


def plain_decode(model, ids, max_tokens, sampler=None, processors=None, seed=None, eos=()) -> list[int]:
    """mlx-lm's own one-token-at-a-time decode (what a lone request runs without drafts), ending at the first of
    ``eos`` (the model's ends of turn)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    if seed is not None:
        mx.random.seed(seed)
    out = []
    for t, _ in generate_step(mx.array(ids), model, max_tokens=max_tokens, sampler=sampler,
                              logits_processors=processors, prompt_cache=make_prompt_cache(model)):
        out.append(int(t))
        if int(t) in eos:  # the end of the turn ends a row (mlx-lm's step would decode on past it)
            break
    return out
