"""GGUF architectures as mlx-lm model classes: tensor names, what a tensor needs changed, and the config.

Rules (each from how llama.cpp's ``convert_hf_to_gguf.py`` writes the architecture):

- ``llama`` (Llama 1–3, Mistral, Ministral, SmolLM …): Q/K rows are permuted for the interleaved RoPE, so
  the config says ``rope_traditional: true``. A ``rope_freqs`` tensor (Llama 3.1+) holds the per-dimension
  factors of Llama 3's RoPE scaling; the factors are fitted back to mlx-lm's ``llama3`` rope parameters and
  checked to reproduce every factor, else refused;
- ``qwen2``, ``qwen3``, ``phi3`` (fused ``qkv`` and ``gate_up``): the split-half RoPE, nothing permuted;
  Phi-3's ``rope.dimension_count`` below the head size (Phi-4-mini) is mlx-lm's ``partial_rotary_factor``,
  its ``rope_factors_long/short`` tensors (128k and Phi-3.5 models) mlx-lm's ``longrope`` (``gguf_rope``);
- ``qwen2moe``, ``qwen3moe``: expert tensors are stored stacked (``ffn_*_exps``: experts × out × in), as
  mlx-lm's ``switch_mlp`` holds them; the shared expert and its gate (Qwen2-MoE) map one to one;
- ``gemma2``, ``gemma3``: the converter adds 1 to every norm weight (Gemma's RMSNorm multiplies by 1 + w),
  taken off again here; llama.cpp's fixed choices the file does not carry (the query scale of the 27B
  models, Gemma 3's local RoPE base and sliding-window pattern) are made the same way;
- ``deepseek2`` (DeepSeek-V2, V2-Lite; and, with sigmoid routing, the DeepSeek-V3 family: Moonlight, Kimi,
  V3/R1): multi-head latent attention (``q_proj`` or ``q_a``/``q_b``, ``kv_a_proj_with_mqa``, ``kv_b``).
  llama.cpp's newer files split ``kv_b`` per head into ``attn_k_b`` (heads × kv_lora × nope, transposed)
  and ``attn_v_b`` (heads × v × kv_lora). Softmax routing is mlx-lm's ``deepseek_v2``, whose ``kv_b_proj``
  the two are joined back into; sigmoid routing (``expert_gating_func`` 2, with ``exp_probs_b``, the
  selection bias) is its ``deepseek_v3``, which holds the two halves as they are (``embed_q``,
  ``unembed_out``). The RoPE is the interleaved one, unpermuted, with YaRN; the first
  ``leading_dense_block_count`` layers are dense, the rest routed experts (stacked like Qwen's) with shared
  experts. What the class cannot compute is refused by name (``arch_refusal``): normalised top-k weights
  under softmax routing, a selection bias without sigmoid routing (or the reverse), a tied output.

RoPE scaling (``rope.scaling.type``) is mapped only where the mlx-lm class computes it (``ROPE_SCALING``):
linear, and YaRN for Llama / Qwen2 / Qwen3 (``gguf_rope``); the MoE classes and Gemma 2 build a plain RoPE
whatever their config says, so a scaled file of theirs is refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .gguf_rope import (UnfittedRope, llama3_scaling, longrope_scaling, plain_yarn_scaling, trained_context,
                        yarn_scaling)

__all__ = ["ARCHITECTURES", "AUXILIARY", "UnfittedRope", "UnmappedTensor", "adjuster", "arch_config",
           "arch_refusal", "join_kv_b", "requantizable", "widened", "llama3_scaling", "mlx_name"]

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
_MLA = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj", "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm",
        "attn_q_b": "self_attn.q_b_proj", "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
        "attn_kv_a_norm": "self_attn.kv_a_layernorm", "attn_kv_b": "self_attn.kv_b_proj",
        "attn_k_b": "self_attn.k_b", "attn_v_b": "self_attn.v_b",  # as mlx-lm holds them: ``adjuster``
        "exp_probs_b": "mlp.gate.e_score_correction",  # (.bias: mlx-lm's e_score_correction_bias)
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", **_EXPERTS,
        "ffn_gate_shexp": "mlp.shared_experts.gate_proj", "ffn_up_shexp": "mlp.shared_experts.up_proj",
        "ffn_down_shexp": "mlp.shared_experts.down_proj"}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# read into the config, not weights
AUXILIARY = {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}


@dataclass(frozen=True)
class Arch:
    model_type: str
    hf_class: str
    layer: dict
    traditional_rope: bool = False
    extra: Callable[[Callable, dict, dict], dict] | None = None  # (get, header meta, aux) -> config keys
    norm_plus_one: bool = False
    notes: tuple[str, ...] = field(default=())
    plain: tuple[str, ...] = ()  # MLX name endings the class holds as plain arrays (never quantized)


def _moe(get, meta, aux=None) -> dict:
    return {"num_experts": int(get("expert_count")), "num_experts_per_tok": int(get("expert_used_count")),
            "moe_intermediate_size": int(get("expert_feed_forward_length"))}


def _qwen2moe(get, meta, aux) -> dict:
    shared = get("expert_shared_feed_forward_length")
    return {**_moe(get, meta), "shared_expert_intermediate_size": int(shared or get("expert_feed_forward_length"))}


def _qwen3moe(get, meta, aux) -> dict:
    return {**_moe(get, meta), "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True}


def _query_scalar(get, hidden_27b: int, layers_27b: int) -> int:
    """llama.cpp: the 27B models scale queries by hidden / heads, the others by the head size."""
    heads = int(get("attention.head_count"))
    if int(get("block_count")) == layers_27b:
        return int(get("embedding_length")) // heads
    return int(get("attention.key_length", int(get("embedding_length")) // heads))


def _gemma2(get, meta, aux) -> dict:
    return {"attn_logit_softcapping": float(get("attn_logit_softcapping", 50.0)),
            "final_logit_softcapping": float(get("final_logit_softcapping", 30.0)),
            "query_pre_attn_scalar": _query_scalar(get, 4608, 46)}


def _gemma3(get, meta, aux) -> dict:
    out = {"query_pre_attn_scalar": _query_scalar(get, 5376, 62), "rope_local_base_freq": 10000.0,
           "sliding_window": int(get("attention.sliding_window", 512)), "sliding_window_pattern": 6}
    if get("rope.scaling.type") == "linear":
        out["rope_scaling"] = {"rope_type": "linear", "factor": float(get("rope.scaling.factor", 1.0))}
    return out


def _phi3(get, meta, aux) -> dict:
    head_dim = int(get("embedding_length")) // int(get("attention.head_count"))  # mlx-lm's phi3 head size
    rope_dims = int(get("rope.dimension_count", head_dim))
    out = {}
    if rope_dims != head_dim:  # mlx-lm rotates int(head_dim * factor) dimensions: a factor that rounds to them
        factor = rope_dims / head_dim
        out["partial_rotary_factor"] = factor if int(head_dim * factor) == rope_dims else (rope_dims + .5) / head_dim
    if "rope_factors_long.weight" in aux:
        out.update(longrope_scaling(aux["rope_factors_long.weight"], aux.get("rope_factors_short.weight"),
                                    trained_context(get),
                                    int(get("rope.scaling.original_context_length", 0)), rope_dims,
                                    get("rope.scaling.attn_factor")))
    return out


def _deepseek2(get, meta, aux) -> dict:
    heads, rope_dims = int(get("attention.head_count")), int(get("rope.dimension_count"))
    if get("attention.key_length_mla") is not None:  # llama.cpp's files since the k_b/v_b split
        qk_head, v_head = int(get("attention.key_length_mla")), int(get("attention.value_length_mla"))
    else:
        qk_head, v_head = int(get("attention.key_length")), int(get("attention.value_length"))
    groups = int(get("expert_group_count", 0) or 0)
    shared = int(get("expert_shared_count", 0) or 0)
    scaling = get("rope.scaling.type")
    out = {
        "num_key_value_heads": heads,  # llama.cpp writes 1 (its MQA view of the latent); mlx-lm expands it
        "kv_lora_rank": int(get("attention.kv_lora_rank")),
        "q_lora_rank": int(get("attention.q_lora_rank")) if get("attention.q_lora_rank") else None,
        "qk_rope_head_dim": rope_dims, "qk_nope_head_dim": qk_head - rope_dims, "v_head_dim": v_head,
        "first_k_dense_replace": int(get("leading_dense_block_count", 0)), "moe_layer_freq": 1,
        "routed_scaling_factor": float(get("expert_weights_scale", 1.0) or 1.0),
        "topk_method": "group_limited_greedy" if groups > 1 else "greedy",
        "rope_scaling": yarn_scaling(get("rope.scaling.factor", 1.0) if scaling == "yarn" else 1.0,
                                     int(get("rope.scaling.original_context_length", 0)
                                         or trained_context(get)),
                                     float(get("rope.scaling.yarn_log_multiplier", 0.0) or 0.0),
                                     float(get("rope.scaling.yarn_beta_fast", 32.0)),
                                     float(get("rope.scaling.yarn_beta_slow", 1.0))),
    }
    if get("expert_count"):
        out.update(n_routed_experts=int(get("expert_count")), num_experts_per_tok=int(get("expert_used_count")),
                   moe_intermediate_size=int(get("expert_feed_forward_length")),
                   n_shared_experts=shared or None)
    if groups > 1:
        out.update(n_group=groups, topk_group=int(get("expert_group_used_count")))
    if sigmoid_routing(get):
        out.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], scoring_func="sigmoid",
                   topk_method="noaux_tc", norm_topk_prob=bool(get("expert_weights_norm", False)),
                   n_group=max(groups, 1), topk_group=int(get("expert_group_used_count", 1) or 1))
    return out


def sigmoid_routing(get) -> bool:
    """DeepSeek-V3's routing (llama.cpp's expert_gating_func 2); 1 or none (older V2 files) is softmax."""
    return int(get("expert_gating_func", 1) or 1) == 2


ARCHITECTURES = {
    "llama": Arch("llama", "LlamaForCausalLM", _DENSE, traditional_rope=True),
    "qwen2": Arch("qwen2", "Qwen2ForCausalLM", _DENSE),
    "qwen3": Arch("qwen3", "Qwen3ForCausalLM", _DENSE),
    "phi3": Arch("phi3", "Phi3ForCausalLM", _PHI3, extra=_phi3),
    "qwen2moe": Arch("qwen2_moe", "Qwen2MoeForCausalLM", {**_DENSE, **_EXPERTS, **_SHARED_EXPERT}, extra=_qwen2moe),
    "qwen3moe": Arch("qwen3_moe", "Qwen3MoeForCausalLM", {**_DENSE, **_EXPERTS}, extra=_qwen3moe),
    "gemma2": Arch("gemma2", "Gemma2ForCausalLM", _GEMMA, extra=_gemma2, norm_plus_one=True),
    "gemma3": Arch("gemma3_text", "Gemma3ForCausalLM", _GEMMA, extra=_gemma3, norm_plus_one=True),
    "deepseek2": Arch("deepseek_v2", "DeepseekV2ForCausalLM", _MLA, traditional_rope=True, extra=_deepseek2,
                      plain=("mlp.gate.weight",)),  # MoEGate's weight is no Linear (both classes)
}


# rope.scaling.type each mlx-lm class computes (the MoE classes and gemma2 build a plain RoPE whatever the
# config says; mlx-lm's DeepSeek classes always build their YaRN)
ROPE_SCALING = {"llama": ("none", "linear", "yarn"), "qwen2": ("none", "linear", "yarn"),
                "qwen3": ("none", "linear", "yarn"), "phi3": ("none", "linear"), "gemma3": ("none", "linear"),
                "deepseek2": ("none", "yarn")}


def arch_refusal(arch: str, meta: dict, names: set[str]) -> str | None:
    """Why the mlx-lm class of ``arch`` cannot compute this file (``names``: its tensors), or None."""
    def get(key, default=None):
        return meta.get(f"{arch}.{key}", default)

    scaling = get("rope.scaling.type")
    allowed = ROPE_SCALING.get(arch, ("none",))
    if scaling not in (None, *allowed):
        if allowed == ("none",):
            return (f"RoPE scaling {scaling!r} is not supported for {arch}: mlx-lm's "
                    f"{ARCHITECTURES[arch].model_type} class builds a plain RoPE whatever its config says")
        return (f"RoPE scaling {scaling!r} is not supported for {arch} (supported: {', '.join(allowed[1:])}"
                f"{', rope_freqs' if arch == 'llama' else ''}"
                f"{', rope_factors_long/short' if arch == 'phi3' else ''}: what mlx-lm's class computes)")
    if scaling == "yarn" and arch != "deepseek2":
        if "rope_freqs.weight" in names:
            return "rope_freqs (Llama 3's RoPE factors) together with YaRN is not supported"
        try:
            plain_yarn_scaling(get)
        except UnfittedRope as exc:
            return str(exc)
    if any(n.startswith("rope_factors") for n in names) and arch != "phi3":
        return f"rope_factors_long/short (Phi-3's long-context RoPE factors) are not supported for {arch}"
    if arch != "deepseek2":
        return None
    gating, bias = int(get("expert_gating_func", 1) or 1), any(n.endswith("exp_probs_b.bias") for n in names)
    if gating not in (1, 2):
        return f"expert_gating_func {gating} is not supported (1: softmax, DeepSeek-V2; 2: sigmoid, DeepSeek-V3)"
    if bias != (gating == 2) and any("_exps." in n for n in names):
        return ("sigmoid expert routing without its selection bias (exp_probs_b), or that bias with softmax "
                "routing, is not supported: mlx-lm's deepseek_v2 routes by softmax, its deepseek_v3 by sigmoid "
                "with the bias")
    if gating == 1 and get("expert_weights_norm"):
        return ("expert_weights_norm (normalised top-k expert weights) with softmax routing is not supported: "
                "mlx-lm's deepseek_v2 does not normalise them")
    for n in names:
        m = re.fullmatch(r"blk\.(\d+)\.attn_[kv]_b\.weight", n)
        if m and not {f"blk.{m.group(1)}.attn_k_b.weight", f"blk.{m.group(1)}.attn_v_b.weight"} <= names \
                and f"blk.{m.group(1)}.attn_kv_b.weight" not in names:
            return f"{n} without its other half (attn_k_b and attn_v_b together make kv_b)"
    if "output.weight" not in names:
        return "a tied output (no output.weight) is not supported: mlx-lm's DeepSeek classes have their own lm_head"
    return None


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


def adjuster(arch: str, names: set[str]) -> Callable[[str, object], list]:
    """What changes about a float tensor on its way back, as ``adjust(mlx name, float32 numpy)`` -> the
    (name, array) pairs to write: Gemma's norms lose the 1 the converter added; a shared expert's gate, stored
    as a vector, becomes the one-row matrix mlx-lm's Linear holds; DeepSeek-V2's ``k_b`` and ``v_b`` are held
    until both are read, then written as the ``kv_b_proj`` they were split from (dropped where the file also
    has ``kv_b`` itself; DeepSeek-V3's class holds them as they are). ``names``: the file's tensors, as MLX
    names."""
    plus_one = ARCHITECTURES[arch].norm_plus_one
    held: dict[str, dict] = {}
    sigmoid = any(n.endswith(".mlp.gate.e_score_correction.bias") for n in names)  # deepseek_v3

    def adjust(name: str, a) -> list:
        if plus_one and name.endswith("norm.weight"):
            a = a - 1.0
        if name.endswith("shared_expert_gate.weight") and a.ndim == 1:
            a = a.reshape(1, -1)
        if name.endswith(".mlp.gate.e_score_correction.bias"):
            return [(name.replace("e_score_correction.bias", "e_score_correction_bias"), a)]
        if name.endswith((".self_attn.k_b.weight", ".self_attn.v_b.weight")):
            prefix, part = name[:-len(".k_b.weight")], name[-len("k_b.weight"):-len(".weight")]
            if f"{prefix}.kv_b_proj.weight" in names:
                return []
            if sigmoid:  # deepseek_v3 holds the halves: embed_q (k_b) and unembed_out (v_b)
                return [(f"{prefix}.{'embed_q' if part == 'k_b' else 'unembed_out'}.weight", a)]
            parts = held.setdefault(prefix, {})
            parts[part] = a
            if len(parts) < 2:
                return []
            del held[prefix]
            return [(f"{prefix}.kv_b_proj.weight", join_kv_b(parts["k_b"], parts["v_b"]))]
        return [(name, a)]

    return adjust


def join_kv_b(k_b, v_b):
    """llama.cpp's ``attn_k_b`` (heads × kv_lora × nope) and ``attn_v_b`` (heads × v × kv_lora) as the
    ``kv_b_proj`` weight they came from (per head: the nope rows, then the v rows; × kv_lora)."""
    import numpy as np

    if k_b.ndim != 3 or v_b.ndim != 3 or k_b.shape[0] != v_b.shape[0] or k_b.shape[1] != v_b.shape[2]:
        raise UnmappedTensor(f"attn_k_b {k_b.shape} and attn_v_b {v_b.shape} are not the two halves of one kv_b")
    return np.concatenate([np.swapaxes(k_b, 1, 2), v_b], axis=1).reshape(-1, k_b.shape[1])


def widened(arch: str) -> Callable[[str], bool]:
    """Tensors (MLX names) the converter must widen even where their blocks could be kept: those joined into
    another, and those the class holds as plain arrays."""
    ends = (".self_attn.k_b.weight", ".self_attn.v_b.weight", *ARCHITECTURES[arch].plain)
    return lambda name: name.endswith(ends)


def requantizable(arch: str) -> Callable[[str], bool]:
    """Whether a widened tensor may be requantized (``quantized`` form): not one the class holds plain."""
    plain = ARCHITECTURES[arch].plain
    return lambda name: not plain or not name.endswith(plain)


def arch_config(arch: str, meta: dict, vocab_size: int, has_output: bool, has_bias: bool,
                aux: dict | None = None) -> dict:
    """config.json for mlx-lm, from the header metadata (``meta``: scalars; ``aux``: the ``AUXILIARY`` tensors
    the file has, by name, as numpy)."""
    aux = aux or {}
    rope_freqs = aux.get("rope_freqs.weight")
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
        "max_position_embeddings": trained_context(get),
        "tie_word_embeddings": not has_output,
        "attention_bias": has_bias,
        "eos_token_id": list(dict.fromkeys(eos)),
        "torch_dtype": "float32",
    }
    if meta.get("tokenizer.ggml.bos_token_id") is not None:
        config["bos_token_id"] = int(meta["tokenizer.ggml.bos_token_id"])
    if get("rope.scaling.type") == "linear" and arch != "gemma3":
        config["rope_scaling"] = {"type": "linear", "factor": float(get("rope.scaling.factor", 1.0))}
    if get("rope.scaling.type") == "yarn" and arch != "deepseek2":
        config["rope_scaling"] = plain_yarn_scaling(get)
    if rope_freqs is not None:
        config["rope_scaling"] = llama3_scaling(rope_freqs, config["rope_theta"], config["head_dim"],
                                                int(get("rope.scaling.original_context_length", 0) or 8192))
    if spec.extra is not None:
        config.update(spec.extra(get, meta, aux))
    return config
