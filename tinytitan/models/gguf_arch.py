"""GGUF architectures as mlx-lm model classes: tensor names, what a tensor needs changed, and the config.

Rules (each from how llama.cpp's ``convert_hf_to_gguf.py`` writes the architecture):

- ``llama`` (Llama 1–3, Mistral, Ministral, SmolLM …): Q/K rows are permuted for the interleaved RoPE, so
  the config says ``rope_traditional: true``. A ``rope_freqs`` tensor (Llama 3.1+) holds the per-dimension
  factors of Llama 3's RoPE scaling; the factors are fitted back to mlx-lm's ``llama3`` rope parameters and
  checked to reproduce every factor, else refused;
- ``qwen2``, ``qwen3``, ``phi3`` (fused ``qkv`` and ``gate_up``): the split-half RoPE, nothing permuted;
- ``qwen2moe``, ``qwen3moe``: expert tensors are stored stacked (``ffn_*_exps``: experts × out × in), as
  mlx-lm's ``switch_mlp`` holds them; the shared expert and its gate (Qwen2-MoE) map one to one;
- ``gemma2``, ``gemma3``: the converter adds 1 to every norm weight (Gemma's RMSNorm multiplies by 1 + w),
  taken off again here; llama.cpp's fixed choices the file does not carry (the query scale of the 27B
  models, Gemma 3's local RoPE base and sliding-window pattern) are made the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

SUFFIXES = ("weight", "bias", "scales", "biases")

_DENSE = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_EXPERTS = {
    "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj", "ffn_down_exps": "mlp.switch_mlp.down_proj",
}
_SHARED_EXPERT = {
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
}
_GEMMA = {**_DENSE, "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
          "post_ffw_norm": "post_feedforward_layernorm"}
_PHI3 = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
         "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
AUXILIARY = {"rope_freqs.weight"}  # read into the config, not a weight


@dataclass(frozen=True)
class Arch:
    model_type: str
    hf_class: str
    layer: dict
    traditional_rope: bool = False
    extra: Callable[[Callable, dict], dict] | None = None  # (get, header meta) -> config keys
    norm_plus_one: bool = False
    notes: tuple[str, ...] = field(default=())


def _moe(get, meta) -> dict:
    return {"num_experts": int(get("expert_count")), "num_experts_per_tok": int(get("expert_used_count")),
            "moe_intermediate_size": int(get("expert_feed_forward_length"))}


def _qwen2moe(get, meta) -> dict:
    shared = get("expert_shared_feed_forward_length")
    return {**_moe(get, meta), "shared_expert_intermediate_size": int(shared or get("expert_feed_forward_length"))}


def _qwen3moe(get, meta) -> dict:
    return {**_moe(get, meta), "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True}


def _query_scalar(get, hidden_27b: int, layers_27b: int) -> int:
    """llama.cpp: the 27B models scale queries by hidden / heads, the others by the head size."""
    heads = int(get("attention.head_count"))
    if int(get("block_count")) == layers_27b:
        return int(get("embedding_length")) // heads
    return int(get("attention.key_length", int(get("embedding_length")) // heads))


def _gemma2(get, meta) -> dict:
    return {"attn_logit_softcapping": float(get("attn_logit_softcapping", 50.0)),
            "final_logit_softcapping": float(get("final_logit_softcapping", 30.0)),
            "query_pre_attn_scalar": _query_scalar(get, 4608, 46)}


def _gemma3(get, meta) -> dict:
    out = {"query_pre_attn_scalar": _query_scalar(get, 5376, 62), "rope_local_base_freq": 10000.0,
           "sliding_window": int(get("attention.sliding_window", 512)), "sliding_window_pattern": 6}
    if get("rope.scaling.type") == "linear":
        out["rope_scaling"] = {"rope_type": "linear", "factor": float(get("rope.scaling.factor", 1.0))}
    return out


ARCHITECTURES = {
    "llama": Arch("llama", "LlamaForCausalLM", _DENSE, traditional_rope=True),
    "qwen2": Arch("qwen2", "Qwen2ForCausalLM", _DENSE),
    "qwen3": Arch("qwen3", "Qwen3ForCausalLM", _DENSE),
    "phi3": Arch("phi3", "Phi3ForCausalLM", _PHI3),
    "qwen2moe": Arch("qwen2_moe", "Qwen2MoeForCausalLM", {**_DENSE, **_EXPERTS, **_SHARED_EXPERT}, extra=_qwen2moe),
    "qwen3moe": Arch("qwen3_moe", "Qwen3MoeForCausalLM", {**_DENSE, **_EXPERTS}, extra=_qwen3moe),
    "gemma2": Arch("gemma2", "Gemma2ForCausalLM", _GEMMA, extra=_gemma2, norm_plus_one=True),
    "gemma3": Arch("gemma3_text", "Gemma3ForCausalLM", _GEMMA, extra=_gemma3, norm_plus_one=True),
}


class UnmappedTensor(ValueError):
    pass


def mlx_name(arch: str, gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight`` (for ``arch``)."""
    base, _, suffix = gguf_name.rpartition(".")
    if suffix not in SUFFIXES:
        raise UnmappedTensor(f"tensor {gguf_name} is not supported")
    layer = ARCHITECTURES[arch].layer
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if m and m.group(2) in layer:
        return f"model.layers.{m.group(1)}.{layer[m.group(2)]}.{suffix}"
    if base in _TOP:
        return f"{_TOP[base]}.{suffix}"
    raise UnmappedTensor(f"tensor {gguf_name} is not supported for architecture {arch} (its layers have "
                         f"{', '.join(sorted(layer))})")


def adjuster(arch: str) -> Callable[[str, object], object]:
    """What changes about a float tensor on its way back: Gemma's norms lose the 1 the converter added; a
    shared expert's gate, stored as a vector, becomes the one-row matrix mlx-lm's Linear holds."""
    plus_one = ARCHITECTURES[arch].norm_plus_one

    def adjust(name: str, a):
        if plus_one and name.endswith("norm.weight"):
            a = a - 1.0
        if name.endswith("shared_expert_gate.weight") and a.ndim == 1:
            a = a.reshape(1, -1)
        return a

    return adjust


def arch_config(arch: str, meta: dict, vocab_size: int, has_output: bool, has_bias: bool,
                rope_freqs=None) -> dict:
    """config.json for mlx-lm, from the header metadata (``meta``: scalars; ``rope_freqs``: the tensor)."""
    spec = ARCHITECTURES[arch]

    def get(key, default=None):
        return meta.get(f"{arch}.{key}", default)

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    eos = [int(meta[f"tokenizer.ggml.{k}_token_id"]) for k in ("eos", "eot", "eom")
           if meta.get(f"tokenizer.ggml.{k}_token_id") is not None]
    config = {
        "model_type": spec.model_type,
        "architectures": [spec.hf_class],
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length", 0) or get("expert_feed_forward_length", 0)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "vocab_size": vocab_size,
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "rope_traditional": spec.traditional_rope,
        "max_position_embeddings": int(get("context_length", 4096)),
        "tie_word_embeddings": not has_output,
        "attention_bias": has_bias,
        "eos_token_id": list(dict.fromkeys(eos)),
        "torch_dtype": "float32",
    }
    if meta.get("tokenizer.ggml.bos_token_id") is not None:
        config["bos_token_id"] = int(meta["tokenizer.ggml.bos_token_id"])
    if get("rope.scaling.type") == "linear" and arch != "gemma3":
        config["rope_scaling"] = {"type": "linear", "factor": float(get("rope.scaling.factor", 1.0))}
    if rope_freqs is not None:
        config["rope_scaling"] = llama3_scaling(rope_freqs, config["rope_theta"], config["head_dim"],
                                                int(get("rope.scaling.original_context_length", 0) or 8192))
    if spec.extra is not None:
        config.update(spec.extra(get, meta))
    return config


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
