"""YaRN outside DeepSeek (Qwen2.5 / Qwen3 128k, Llama-architecture YaRN models): the rope_scaling a GGUF's
``rope.scaling.*`` keys map to, checked against llama.cpp's YaRN as its context parameters and ggml's rope
op define it, and what llama.cpp would compute otherwise refused by name.

The token-for-token comparison of converted tiny models with mlx-lm's own load of the same config is in
test_gguf_archs.py (cases ``*-yarn``).
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from gguf_arch_models import build
from tinytitan.models import gguf
from tinytitan.models.gguf_rope import plain_yarn_scaling


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))


def llama_cpp_yarn(x: np.ndarray, positions, base: float, factor: float, original: int, beta_fast=32.0,
                   beta_slow=1.0, ext_factor=1.0, rope_attn_factor=1.0) -> np.ndarray:
    """llama.cpp's YaRN on the NeoX (split-half) layout, written from its definition:

    - context parameters: ``freq_scale = 1/factor``; ``attn_factor = get_mscale(factor, 1)``, times
      ``1/(1 + 0.1·ln factor)`` (the cancel of the factor ggml applies again), times the file's attn_factor;
    - ggml's rope: the correction dims ``floor(corr(beta_fast))``, ``ceil(corr(beta_slow))`` clipped to
      [0, n_dims-1], with ``corr(r) = n_dims·ln(n_ctx_orig / (2πr)) / (2·ln base)``; per pair ``i``, the ramp
      ``1 - clip((i - low) / max(0.001, high - low), 0, 1)`` times ext_factor mixes the interpolated angle
      ``θ/factor`` with the extrapolated ``θ``, and cos/sin are scaled by ``attn_factor·(1 + 0.1·ln factor)``.
    """
    n_dims = x.shape[-1]

    def corr(rotations):
        return n_dims * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(0.0, math.floor(corr(beta_fast))), min(n_dims - 1.0, math.ceil(corr(beta_slow)))
    get_mscale = (lambda s, m: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0)
    attn_factor = get_mscale(factor, 1.0) / (1.0 + 0.1 * math.log(factor)) * rope_attn_factor
    mscale = attn_factor * (1.0 + 0.1 * math.log(factor))
    half = n_dims // 2
    out = np.empty_like(x)
    for row, p in enumerate(positions):
        for i in range(half):
            extrap = p * base ** (-2 * i / n_dims)
            ramp = (1 - min(1.0, max(0.0, (i - low) / max(0.001, high - low)))) * ext_factor
            theta = extrap / factor * (1 - ramp) + extrap * ramp
            c, s = math.cos(theta) * mscale, math.sin(theta) * mscale
            a, b = x[row, i], x[row, i + half]
            out[row, i], out[row, i + half] = a * c - b * s, a * s + b * c
    return out


@pytest.mark.parametrize("factor, original, base, dims", [(4.0, 32768, 1000000.0, 128), (8.0, 4096, 10000.0, 64),
                                                          (2.0, 256, 10000.0, 16)])
def test_mlx_lm_yarn_is_llama_cpps(factor, original, base, dims):
    """What the mapped rope_scaling makes mlx-lm compute (Qwen3-8B's 4×32k, and others) is llama.cpp's YaRN
    for the same keys, at positions inside and far past the original context."""
    from mlx_lm.models.rope_utils import initialize_rope

    meta = {"rope.scaling.factor": factor, "rope.scaling.original_context_length": original}
    scaling = plain_yarn_scaling(meta.get)
    rope = initialize_rope(dims, base, False, scaling, max_position_embeddings=int(original * factor))
    x = np.random.default_rng(3).standard_normal((6, dims)).astype(np.float32)
    positions = [0, 1, 17, original // 2, original + 5, int(original * factor) - 1]
    want = llama_cpp_yarn(x.astype(np.float64), positions, base, factor, original)
    for row, p in enumerate(positions):
        got = np.array(rope(mx.array(x[row][None, None, None, :]), offset=p)).reshape(-1)
        np.testing.assert_allclose(got, want[row], rtol=0, atol=1e-5 + 2e-7 * p)  # float32 angles: error grows with p
    # and a plain RoPE is not that (the check can fail)
    plain = initialize_rope(dims, base, False, None)
    far = np.array(plain(mx.array(x[-1][None, None, None, :]), offset=positions[-1])).reshape(-1)
    assert not np.allclose(far, want[-1], atol=1e-2)


@pytest.mark.parametrize("key, value, message", [
    ("rope.scaling.attn_factor", 0.8, r"rope.scaling.attn_factor 0.8 is not supported with YaRN"),
    ("rope.scaling.yarn_ext_factor", 0.5, r"rope.scaling.yarn_ext_factor 0.5 is not supported with YaRN"),
    ("rope.scaling.yarn_attn_factor", 1.2, r"rope.scaling.yarn_attn_factor 1.2 is not supported"),
    ("rope.scaling.yarn_log_multiplier", 0.1, r"yarn_log_multiplier is not supported outside DeepSeek"),
])
def test_yarn_mlx_lm_cannot_compute_is_refused_by_name(tmp_path, key, value, message):
    path, _, _ = build("qwen3-yarn", tmp_path, meta_changes={key: value})
    with pytest.raises(gguf.UnsupportedGGUF, match=message):
        gguf.check(path)


@pytest.mark.parametrize("case", ["qwen3moe", "qwen2moe", "gemma2"])
@pytest.mark.parametrize("scaling", ["yarn", "linear"])
def test_rope_scaling_a_class_ignores_is_refused(tmp_path, case, scaling):
    """mlx-lm's MoE classes and gemma2 build a plain RoPE whatever the config says: a scaled file would be
    served with the wrong positions."""
    path, _, _ = build(case, tmp_path, meta_changes={"rope.scaling.type": scaling, "rope.scaling.factor": 4.0})
    with pytest.raises(gguf.UnsupportedGGUF, match=rf"RoPE scaling '{scaling}' is not supported for {case}"):
        gguf.check(path)


def test_yarn_without_original_context_length_uses_the_context_length():
    """As llama.cpp does (its n_ctx_orig_yarn falls back to the training context)."""
    meta = {"rope.scaling.factor": 4.0, "context_length": 40960, "rope.scaling.yarn_beta_fast": 16.0}
    assert plain_yarn_scaling(meta.get) == {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 40960,
                                            "beta_fast": 16.0, "beta_slow": 1.0}
