"""Tiny random-weight models of each new family's own architecture, built on the machine (no download).

Like the demo model: a family fixture's tokenizer (``family_fixtures``: the small byte-level BPE with the
family's markup tokens added, and its real chat template) beside a ``config.json`` of the architecture mlx-lm
runs for that family (``deepseek_v3`` for DeepSeek V3.1, ``deepseek_v32`` for V3.2, ``kimi_k2`` — mlx-lm's name for Kimi K2 on the
DeepSeek V3 architecture —, ``minimax_m2`` for MiniMax M2), a few layers and experts of a few dozen wide, and
weights drawn by mlx from a fixed seed. ``mlx_lm.load`` reads the directory, and ``MLXBackend`` serves it.
"""

from __future__ import annotations

import json
from pathlib import Path

import family_fixtures as ff

_ARCH = {
    "deepseek_v3": dict(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
        num_experts_per_tok=2, routed_scaling_factor=1.0, kv_lora_rank=16, q_lora_rank=32,
        qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=8, topk_method="noaux_tc", scoring_func="sigmoid",
        norm_topk_prob=True, n_group=1, topk_group=1, moe_layer_freq=1, first_k_dense_replace=1,
        rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False),
    "minimax_m2": dict(
        hidden_size=64, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
        num_experts_per_tok=2, num_local_experts=4, shared_intermediate_size=0, num_hidden_layers=2,
        rms_norm_eps=1e-6, rope_theta=10000.0, rotary_dim=8, head_dim=16, use_qk_norm=True,
        scoring_func="sigmoid", tie_word_embeddings=False),
}
_ARCH["deepseek_v32"] = dict(_ARCH["deepseek_v3"], index_head_dim=16, index_n_heads=2, index_topk=16)
ARCHITECTURE = {"deepseek_v3": "deepseek_v3", "deepseek_r1": "deepseek_v3", "deepseek_v32": "deepseek_v32", "kimi_k2": "deepseek_v3", "kimi_k2_thinking": "deepseek_v3",
                "minimax_m2": "minimax_m2"}


def build(family: str, root: Path, seed: int = 7) -> Path:
    """The model directory of ``family`` under ``root`` (its fixture tokenizer, a tiny config, seeded weights)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    out = ff.build(family, root / "models")
    if (out / "model.safetensors").exists():
        return out
    spec = {**ff.SPECS, **ff.VARIANTS}[family]
    config = json.loads((out / "config.json").read_text())
    config.update(_ARCH[ARCHITECTURE[family]], model_type=spec["model_type"], max_position_embeddings=4096)
    vocab = json.loads((out / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    config["eos_token_id"] = ids[spec["eos"]]
    (out / "config.json").write_text(json.dumps(config))
    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    mx.eval(model.parameters())
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})
    return out


def backend(family: str, root: Path):
    from tinytitan.engine.backends.mlx import MLXBackend

    return MLXBackend(build(family, root), f"tiny-{family}")
