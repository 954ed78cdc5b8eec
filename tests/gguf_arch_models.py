"""Tiny random models of each architecture the GGUF converter reads, built by mlx-lm from a config, and their
GGUFs: the weights under llama.cpp's tensor names (the table here is written from llama.cpp's
gguf-py/gguf/constants.py, not from the converter's own), with llama.cpp's changes (a Llama's Q/K permuted,
Gemma's norms plus one, a shared expert's gate as a vector, Llama 3.1's rope_freqs tensor computed as
convert_hf_to_gguf.py computes it). build(case, tmp_path) → the GGUF's path, the reference model, its config."""

from __future__ import annotations

import json
import math

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from gguf_util import permute, tokenizer_metadata, write_typed_gguf
from tinytitan.demo_model import ensure_demo_model


LAYER = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp", "mlp.switch_mlp.gate_proj": "ffn_gate_exps",
    "mlp.switch_mlp.up_proj": "ffn_up_exps", "mlp.switch_mlp.down_proj": "ffn_down_exps",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
    "mlp.shared_expert.up_proj": "ffn_up_shexp", "mlp.shared_expert.down_proj": "ffn_down_shexp",
}
GEMMA = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
         "post_feedforward_layernorm": "post_ffw_norm"}
TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
BASE = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5, "vocab_size": 4096,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": False}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}


def factors(n: int, seed: int) -> list[float]:
    """Phi-3's longrope lists: one factor per frequency pair, between 1 and 4 (as the 128k model's are)."""
    return [float(x) for x in 1.0 + 3.0 * np.random.default_rng(seed).random(n)]


def longrope(rope_dims: int) -> tuple[dict, dict]:
    """(config changes, GGUF metadata) of a Phi-3 128k-style model whose RoPE rotates ``rope_dims``."""
    half = rope_dims // 2
    scaling = {"type": "longrope", "long_factor": factors(half, 1), "short_factor": factors(half, 2)}
    config = {"max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_scaling": scaling}
    meta = {"rope.scaling.original_context_length": 4096, "rope.dimension_count": rope_dims,
            "rope.scaling.attn_factor": math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))}
    return config, meta


def yarn(factor: float = 4.0, original: int = 256) -> tuple[dict, dict]:
    """(config changes, GGUF metadata) of a Qwen2.5 / Qwen3 128k-style YaRN model, as convert_hf_to_gguf.py
    writes its rope_scaling (type, factor, original context length; no attention factor)."""
    config = {"max_position_embeddings": int(original * factor),
              "rope_scaling": {"type": "yarn", "factor": factor, "original_max_position_embeddings": original}}
    meta = {"rope.scaling.type": "yarn", "rope.scaling.factor": factor,
            "rope.scaling.original_context_length": original}
    return config, meta


CASES = {
    # gguf architecture: (mlx-lm model_type, config changes, GGUF metadata beyond the common keys)
    "qwen3-yarn": ("qwen3", "qwen3", yarn()[0], yarn()[1]),
    "qwen2-yarn": ("qwen2", "qwen2", yarn(8.0, 128)[0], yarn(8.0, 128)[1]),
    "llama-yarn": ("llama", "llama", yarn(2.0)[0], yarn(2.0)[1]),
    "llama-rope-freqs": ("llama", "llama", {"head_dim": 64, "hidden_size": 128, "num_attention_heads": 2,
                                            "num_key_value_heads": 1, "rope_theta": 500000.0,
                                            "max_position_embeddings": 131072,
                                            "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                             "original_max_position_embeddings": 8192}}, {}),
    "phi3": ("phi3", "phi3", {"num_key_value_heads": 4}, {}),
    "phi3-longrope": ("phi3", "phi3", {"num_key_value_heads": 4, **longrope(16)[0]}, longrope(16)[1]),
    # Phi-4-mini: a quarter of each head unrotated, tied embeddings, longrope over the rotated part
    "phi4-mini": ("phi3", "phi3", {"partial_rotary_factor": 0.75, "tie_word_embeddings": True, **longrope(12)[0]},
                  longrope(12)[1]),
    "qwen2moe": ("qwen2moe", "qwen2_moe", {**MOE, "shared_expert_intermediate_size": 48},
                 {"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32,
                  "expert_shared_feed_forward_length": 48}),
    "qwen3moe": ("qwen3moe", "qwen3_moe", {**MOE, "decoder_sparse_step": 1, "mlp_only_layers": [],
                                           "norm_topk_prob": True},
                 {"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32}),
    "gemma2": ("gemma2", "gemma2", {"query_pre_attn_scalar": 16, "attn_logit_softcapping": 50.0,
                                    "final_logit_softcapping": 30.0, "tie_word_embeddings": True},
               {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "attention.sliding_window": 4096}),
    "gemma3": ("gemma3", "gemma3_text", {"query_pre_attn_scalar": 16, "sliding_window": 8,
                                         "sliding_window_pattern": 6, "num_hidden_layers": 6,
                                         "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                                         "tie_word_embeddings": True},
               {"attention.sliding_window": 8}),
}


def gguf_name(arch: str, name: str) -> str:
    module, _, suffix = name.rpartition(".")
    if module in TOP:
        return f"{TOP[module]}.{suffix}"
    _, _, n, rest = module.split(".", 3)
    table = {**LAYER, **GEMMA} if arch.startswith("gemma") else LAYER
    return f"blk.{n}.{table[rest]}.{suffix}"


def llama3_rope_freqs(config: dict) -> np.ndarray:
    """convert_hf_to_gguf.py's rope_freqs for a Llama 3.1 config: one factor per frequency pair."""
    s = config["rope_scaling"]
    dim, base = config["head_dim"], config["rope_theta"]
    low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi / (1.0 / base ** (i / dim))
        if wavelen < high_wl:
            out.append(1.0)
        elif wavelen > low_wl:
            out.append(s["factor"])
        else:
            smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def build(case: str, tmp_path, encode=lambda name, a: None, meta_changes=None):
    import importlib

    arch, model_type, changes, meta = CASES[case]
    meta = {**meta, **(meta_changes or {})}
    config = {**BASE, **changes, "model_type": model_type}
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(5)
    model = module.Model(module.ModelArgs.from_dict(config))
    weights = {k: v * 4 if k.endswith("norm.weight") else v  # norms away from 1, so a wrong offset shows
               for k, v in tree_flatten(model.parameters())}
    if case.startswith("gemma"):
        weights = {k: v - 3.5 if k.endswith("norm.weight") else v for k, v in weights.items()}
    model.load_weights(list(weights.items()))
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(reference / "model.safetensors"), weights)

    stored = {}
    for k, v in weights.items():
        if arch == "llama" and k.endswith(("q_proj.weight", "k_proj.weight")):
            v = permute(v, config["num_attention_heads"] if "q_proj" in k else config["num_key_value_heads"])
        if arch.startswith("gemma") and k.endswith("norm.weight"):
            v = v + 1.0
        if k.endswith("shared_expert_gate.weight"):
            v = v.reshape(-1)
        stored[k] = v
    extra = {f"{arch}.{k}": v for k, v in meta.items()}
    tensors = {}
    if case == "llama-rope-freqs":
        tensors["rope_freqs.weight"] = llama3_rope_freqs(config)
        extra["llama.rope.dimension_count"] = config["head_dim"]
    if config.get("rope_scaling", {}).get("type") == "longrope":  # as convert_hf_to_gguf.py writes them
        tensors["rope_factors_long.weight"] = np.array(config["rope_scaling"]["long_factor"], dtype=np.float32)
        tensors["rope_factors_short.weight"] = np.array(config["rope_scaling"]["short_factor"], dtype=np.float32)
    path = tmp_path / f"tiny-{case}.gguf"
    write_typed_gguf(path, stored, config, arch, tokenizer_metadata(ensure_demo_model()), encode,
                     names=lambda n: gguf_name(arch, n), extra=extra, tensors=tensors)
    return path, model, config
