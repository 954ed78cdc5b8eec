"""A GGUF's RoPE scaling, stated as mlx-lm's ``rope_scaling`` config.

Rules (each from how llama.cpp's ``convert_hf_to_gguf.py`` writes it, and what mlx-lm's classes read):

- Llama 3.1+: a ``rope_freqs`` tensor of per-frequency factors; fitted back to mlx-lm's ``llama3`` parameters
  and checked to reproduce every factor, else refused;
- Phi-3 128k / Phi-3.5 / Phi-4-mini (``longrope``): ``rope_factors_long`` / ``rope_factors_short`` tensors,
  ``rope.scaling.original_context_length`` and ``rope.scaling.attn_factor``; the lists go to mlx-lm's
  ``longrope`` as they are. mlx-lm's ``SuScaledRoPE`` computes the attention factor itself (from the context
  length over the original one), so a file whose ``attn_factor`` is another is refused;
- DeepSeek-V2 (``yarn``): factor, original context length and ``rope.scaling.yarn_log_multiplier`` (0.1 ×
  the config's ``mscale_all_dim``); llama.cpp's YaRN has no separate ``mscale``, it computes as the config's
  ``mscale`` equal to ``mscale_all_dim`` does, so both are set to it;
- Llama, Qwen2, Qwen3 (``yarn``: Qwen2.5/Qwen3 128k files): factor and original context length as mlx-lm's
  ``yarn`` (its ``YarnRoPE``, which these classes build through ``initialize_rope``). llama.cpp's YaRN on
  them (ext_factor 1, beta_fast 32 and beta_slow 1 unless the file says others) blends each frequency pair
  between interpolated and extrapolated by the same ramp mlx-lm uses and scales queries and keys by
  ``0.1·ln(factor) + 1``, as mlx-lm's default ``mscale`` 1 / ``mscale_all_dim`` 0 does. What moves llama.cpp
  off that (an ``attn_factor``, ``yarn_attn_factor`` or ``yarn_ext_factor`` other than 1, a
  ``yarn_log_multiplier`` these architectures do not use) is refused by name.
"""

from __future__ import annotations

import math


class UnfittedRope(ValueError):
    pass


def llama3_scaling(factors, base: float, head_dim: int, original: int) -> dict:
    """mlx-lm's ``llama3`` rope_scaling that reproduces ``rope_freqs`` (one factor per frequency pair).

    Llama 3's rule gives each frequency a factor: 1 for short wavelengths, ``factor`` for long ones, and
    between them ``1 / ((1 - s) / factor + s)`` with ``s`` linear in ``original / wavelength``. Two of those
    middle factors fix the line (one, with the usual low_freq_factor 1); any (original, low, high) on the
    same line computes the same frequencies."""
    factors = [float(f) for f in factors]
    wavelens = [2 * math.pi * base ** (2 * i / head_dim) for i in range(len(factors))]
    factor = max(factors)
    if factor <= 1.0:
        raise UnfittedRope("rope_freqs holds no scaling factor above 1")
    middle = [(original / w, (1 / f - 1 / factor) / (1 - 1 / factor))
              for f, w in zip(factors, wavelens) if 1.0 + 1e-6 < f < factor - 1e-6]
    if len(middle) >= 2:
        (x0, s0), (x1, s1) = middle[0], middle[-1]
        slope = (s1 - s0) / (x1 - x0)
        low = -(s0 - slope * x0) / slope
        high = low + 1 / slope
    elif len(middle) == 1:
        low = 1.0
        high = 1.0 + (middle[0][0] - 1.0) / middle[0][1]
    else:
        low, high = 1.0, 4.0
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
               "original_max_position_embeddings": original}
    for f, w in zip(factors, wavelens):
        if w < original / high:
            want = 1.0
        elif w > original / low:
            want = factor
        else:
            s = (original / w - low) / (high - low)
            want = 1 / ((1 - s) / factor + s)
        if abs(want - f) > 1e-3 * max(1.0, f):
            raise UnfittedRope("rope_freqs is not Llama 3's RoPE scaling (no factor, low_freq_factor and "
                               "high_freq_factor reproduce it)")
    return scaling


def longrope_scaling(long, short, context: int, original: int, rope_dims: int,
                     attn_factor: float | None) -> dict:
    """mlx-lm's phi3 config keys for Phi-3's long-context RoPE: ``rope_scaling`` (``longrope``, the two factor
    lists) and ``original_max_position_embeddings``."""
    if short is None:
        raise UnfittedRope("rope_factors_long without rope_factors_short")
    long, short = [float(f) for f in long], [float(f) for f in short]
    if len(long) != rope_dims // 2 or len(short) != rope_dims // 2:
        raise UnfittedRope(f"rope_factors_long/short hold {len(long)}/{len(short)} factors, not one per "
                           f"frequency pair of the {rope_dims} rotated dimensions")
    if not original:
        raise UnfittedRope("rope_factors_long/short without rope.scaling.original_context_length")
    ratio = context / original
    scale = math.sqrt(1 + math.log(ratio) / math.log(original)) if ratio > 1.0 else 1.0
    if attn_factor is not None and abs(float(attn_factor) - scale) > 1e-4 * scale:
        raise UnfittedRope(f"rope.scaling.attn_factor {float(attn_factor):.6g} is not the longrope attention "
                           f"factor mlx-lm computes ({scale:.6g}, from context_length {context} over "
                           f"original_context_length {original})")
    return {"rope_scaling": {"type": "longrope", "long_factor": long, "short_factor": short},
            "original_max_position_embeddings": int(original)}


DEFAULT_CONTEXT = 4096  # the context a file that does not say its own is served with (Ollama's default num_ctx)


def trained_context(get) -> int:
    """The file's ``context_length`` (``get``: its ``<arch>.`` keys); ``DEFAULT_CONTEXT`` where the key is missing,
    0 or not a number (the converter says so: gguf.py)."""
    try:
        n = int(get("context_length"))
    except (TypeError, ValueError):
        return DEFAULT_CONTEXT
    return n if n > 0 else DEFAULT_CONTEXT


def yarn_scaling(factor: float, original: int, log_multiplier: float, beta_fast: float = 32.0,
                 beta_slow: float = 1.0) -> dict:
    """mlx-lm's deepseek_v2 ``rope_scaling`` for llama.cpp's YaRN (``factor`` 1: no scaling, as mlx-lm's
    class still wants a factor)."""
    mscale = float(log_multiplier) / 0.1
    return {"type": "yarn", "factor": float(factor), "original_max_position_embeddings": int(original),
            "beta_fast": float(beta_fast), "beta_slow": float(beta_slow), "mscale": mscale,
            "mscale_all_dim": mscale}


def plain_yarn_scaling(get) -> dict:
    """mlx-lm's ``yarn`` rope_scaling for a Llama / Qwen2 / Qwen3 file's YaRN (``get``: the file's
    ``<arch>.`` keys)."""
    factor = float(get("rope.scaling.factor", 1.0) or 1.0)
    if factor <= 0:
        raise UnfittedRope(f"rope.scaling.factor {factor:g} is not a YaRN factor (it must be above 0)")
    for key in ("rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor", "rope.scaling.yarn_ext_factor"):
        v = get(key)
        if v is not None and abs(float(v) - 1.0) > 1e-6:
            raise UnfittedRope(f"{key} {float(v):g} is not supported with YaRN: mlx-lm's YaRN has no such "
                               "factor (1, llama.cpp's default, is)")
    if float(get("rope.scaling.yarn_log_multiplier", 0.0) or 0.0):
        raise UnfittedRope("rope.scaling.yarn_log_multiplier is not supported outside DeepSeek's architecture")
    original = int(get("rope.scaling.original_context_length", 0) or trained_context(get))
    return {"type": "yarn", "factor": factor, "original_max_position_embeddings": original,
            "beta_fast": float(get("rope.scaling.yarn_beta_fast", 32.0)),
            "beta_slow": float(get("rope.scaling.yarn_beta_slow", 1.0))}
