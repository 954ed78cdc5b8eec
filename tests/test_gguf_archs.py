"""Each architecture a GGUF may hold, as llama.cpp's converter writes it, converted and compared token for token
with the same weights loaded by mlx-lm directly.

Every model here is tiny and random, built with its GGUF by gguf_arch_models.py (llama.cpp's tensor names and
its changes to the weights).
"""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from gguf_util import tokenizer_metadata, write_typed_gguf
from tinytitan.demo_model import ensure_demo_model
from tinytitan.models import gguf
from gguf_arch_models import BASE, CASES, build, gguf_name, llama3_rope_freqs


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))


def greedy(model, ids, n=12):
    out = list(ids)
    for _ in range(n):
        out.append(int(mx.argmax(model(mx.array([out]))[0, -1]).item()))
    return out[len(ids):]


@pytest.mark.parametrize("case", sorted(CASES))
def test_architecture_converts_to_the_same_model(tmp_path, case):
    from mlx_lm import load

    path, reference, config = build(case, tmp_path)
    out = gguf.ensure_converted(path, "float32")
    conf = json.loads((out / "config.json").read_text())
    assert conf["model_type"] == CASES[case][1]
    model, _ = load(str(out))
    ids = list(range(30, 50))
    want, got = reference(mx.array([ids]))[0], model(mx.array([ids]))[0]
    assert mx.allclose(got, want, atol=1e-4).item(), mx.abs(got - want).max().item()
    assert greedy(model, ids) == greedy(reference, ids)
    # the listing's parameter count is the weights', not the RoPE factors read into the config
    facts = json.loads((out / "gguf_source.json").read_text())
    assert facts["parameters"] == sum(v.size for _, v in tree_flatten(reference.parameters()))
    if case == "llama-rope-freqs":
        assert conf["rope_scaling"]["rope_type"] == "llama3" and conf["rope_scaling"]["factor"] == 8.0
        # positions past the original window: the scaled RoPE is the one in use (a plain RoPE would differ)
        far = list(range(30, 50)) * 3
        assert mx.allclose(model(mx.array([far]))[0], reference(mx.array([far]))[0], atol=1e-4).item()
    if config.get("rope_scaling", {}).get("type") == "yarn":
        assert conf["rope_scaling"] == {**config["rope_scaling"], "beta_fast": 32.0, "beta_slow": 1.0}
        # the scaling is the one in use: without it the same weights compute something else
        plain = {k: v for k, v in conf.items() if k != "rope_scaling"}
        (out / "config.json").write_text(json.dumps(plain))
        unscaled, _ = load(str(out))
        assert not mx.allclose(unscaled(mx.array([ids]))[0], want, atol=1e-3).item()
    if config.get("rope_scaling", {}).get("type") == "longrope":
        assert conf["rope_scaling"]["type"] == "longrope" and conf["original_max_position_embeddings"] == 4096
        assert conf["rope_scaling"]["long_factor"] == pytest.approx(config["rope_scaling"]["long_factor"])
        assert conf.get("partial_rotary_factor", 1.0) == config.get("partial_rotary_factor", 1.0)


def test_phi3_longrope_with_another_attention_factor_is_refused(tmp_path):
    """mlx-lm computes the longrope attention factor itself: a file stating another one is refused."""
    path, _, _ = build("phi3-longrope", tmp_path, meta_changes={"rope.scaling.attn_factor": 1.5})
    with pytest.raises(gguf.UnsupportedGGUF, match=r"rope.scaling.attn_factor 1.5 is not the longrope"):
        gguf.ensure_converted(path, "float32")


def test_expert_stacks_requantize(tmp_path):
    """Stacked experts stored Q5_0 (experts × rows of blocks) come out as MLX 8-bit stacks."""
    import gguf as gguf_package
    from mlx_lm import load

    q5 = gguf_package.GGMLQuantizationType.Q5_0
    path, reference, _ = build("qwen3moe", tmp_path, lambda name, a: (gguf_package.quants.quantize(a, q5), q5)
                               if "switch_mlp" in name else None)
    out = gguf.ensure_converted(path, "quantized")
    conf = json.loads((out / "config.json").read_text())
    assert conf["quantization"]["bits"] == 8
    assert "model.layers.0.mlp.switch_mlp.up_proj" not in conf["quantization"]  # the default: 8 bits
    model, _ = load(str(out))
    exact, _ = load(str(gguf.ensure_converted(path, "float32")))  # what the Q5_0 blocks stand for
    ids = list(range(30, 50))
    want = exact(mx.array([ids]))[0]
    assert mx.abs(model(mx.array([ids]))[0] - want).max().item() < 0.05 * mx.abs(want).max().item()


def test_rope_freqs_that_are_not_llama3_scaling_are_refused(tmp_path):
    from tinytitan.models.gguf_arch import UnfittedRope, llama3_scaling

    config = {**BASE, **CASES["llama-rope-freqs"][2]}
    factors = llama3_rope_freqs(config)
    fitted = llama3_scaling(factors, config["rope_theta"], config["head_dim"], 8192)
    assert fitted["low_freq_factor"] == pytest.approx(1.0) and fitted["high_freq_factor"] == pytest.approx(4.0)
    with pytest.raises(UnfittedRope, match="not Llama 3's RoPE scaling"):
        llama3_scaling(factors[::-1], config["rope_theta"], config["head_dim"], 8192)


# DeepSeek-V2: multi-head latent attention, leading dense layers, softmax-routed and shared experts, YaRN
MLA = {"self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm", "self_attn.q_b_proj": "attn_q_b",
       "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa", "self_attn.kv_a_layernorm": "attn_kv_a_norm",
       "self_attn.kv_b_proj": "attn_kv_b", "self_attn.k_b": "attn_k_b", "self_attn.v_b": "attn_v_b",
       "self_attn.embed_q": "attn_k_b", "self_attn.unembed_out": "attn_v_b",  # deepseek_v3's names of the two
       "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
       "mlp.shared_experts.down_proj": "ffn_down_shexp"}
DEEPSEEK = {**BASE, "model_type": "deepseek_v2", "num_hidden_layers": 3, "num_key_value_heads": 4,
            "max_position_embeddings": 163840, "kv_lora_rank": 32, "q_lora_rank": None, "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 32, "v_head_dim": 32, "n_routed_experts": 4, "n_shared_experts": 2,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
            "routed_scaling_factor": 1.0, "topk_method": "greedy",
            "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}}
DEEPSEEK_CASES = {
    # case: (config changes, how kv_b is stored: "kv_b" as older llama.cpp wrote it, "split" as k_b + v_b, "both")
    "v2-lite-kv_b": ({}, "kv_b"),
    "v2-lite-split": ({}, "split"),
    "v2-lite-both": ({}, "both"),
    "v2-q_lora-grouped": ({"q_lora_rank": 48, "routed_scaling_factor": 16.0, "topk_method": "group_limited_greedy",
                           "n_group": 2, "topk_group": 1}, "split"),
}
V3 = {"model_type": "deepseek_v3", "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
      "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5, "q_lora_rank": 48}
DEEPSEEK_CASES.update({  # sigmoid routing with a selection bias (DeepSeek-V3, Moonlight, Kimi): mlx-lm's deepseek_v3
    "v3-split": (V3, "split"),
    "v3-kv_b": (V3, "kv_b"),
})


def deepseek_gguf_name(name: str) -> str:
    if name.endswith(".mlp.gate.e_score_correction_bias"):
        return f"blk.{name.split('.')[2]}.exp_probs_b.bias"
    module, _, suffix = name.rpartition(".")
    _, _, n, rest = module.split(".", 3) if module.startswith("model.layers.") else (0, 0, 0, "")
    return f"blk.{n}.{MLA[rest]}.{suffix}" if rest in MLA else gguf_name("deepseek2", name)


def build_deepseek(case: str, tmp_path, encode=lambda name, a: None, meta_changes=None):
    """A tiny random deepseek_v2 and its GGUF, with the metadata DeepseekV2Model in convert_hf_to_gguf.py
    writes (newer files: head_count_kv 1 and the MLA key/value lengths; older ones: the per-head lengths)."""
    import importlib

    changes, kv_form = DEEPSEEK_CASES[case]
    config = {**DEEPSEEK, **changes}
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    mx.random.seed(7)
    model = module.Model(module.ModelArgs.from_dict(config))
    weights = {k: v * 4 if k.endswith("norm.weight") else v for k, v in tree_flatten(model.parameters())}
    # mlx-lm starts the router at zeros (every expert alike): a random router and selection bias, so which
    # experts are chosen, and how they are weighted, depend on the converted router
    weights = {k: mx.random.normal(v.shape) * 0.3 if k.endswith(("e_score_correction_bias", "mlp.gate.weight")) else v
               for k, v in weights.items()}
    model.load_weights(list(weights.items()))
    heads, nope, v, rank = (config["num_attention_heads"], config["qk_nope_head_dim"], config["v_head_dim"],
                            config["kv_lora_rank"])
    stored = {}
    for k, w in weights.items():
        if k.endswith("embed_q.weight"):  # deepseek_v3 holds k_b / v_b: the kv_b form joins them
            if kv_form != "split":
                v_b = weights[k.replace("embed_q", "unembed_out")]
                stored[k.replace("embed_q", "kv_b_proj")] = mx.concatenate([w.swapaxes(1, 2), v_b], axis=1).reshape(
                    -1, rank)
            if kv_form == "kv_b":
                continue
        if k.endswith("unembed_out.weight") and kv_form == "kv_b":
            continue
        if k.endswith("kv_b_proj.weight") and kv_form != "kv_b":  # convert_hf_to_gguf.py's split, per head
            per_head = w.reshape(heads, nope + v, rank)
            stored[k.replace("kv_b_proj", "k_b")] = per_head[:, :nope, :].swapaxes(1, 2)
            stored[k.replace("kv_b_proj", "v_b")] = per_head[:, nope:, :]
            if kv_form == "split":
                continue
        stored[k] = w
    rope, scaling = config["qk_rope_head_dim"], config["rope_scaling"]
    meta = {"leading_dense_block_count": config["first_k_dense_replace"], "vocab_size": config["vocab_size"],
            "attention.kv_lora_rank": rank, "expert_feed_forward_length": config["moe_intermediate_size"],
            "expert_count": config["n_routed_experts"], "expert_shared_count": config["n_shared_experts"],
            "expert_used_count": config["num_experts_per_tok"],
            "expert_weights_scale": config["routed_scaling_factor"], "rope.dimension_count": rope,
            "rope.scaling.type": "yarn", "rope.scaling.factor": scaling["factor"],
            "rope.scaling.original_context_length": scaling["original_max_position_embeddings"],
            "rope.scaling.yarn_log_multiplier": 0.1 * scaling["mscale_all_dim"]}
    if config["q_lora_rank"]:
        meta["attention.q_lora_rank"] = config["q_lora_rank"]
    if config.get("n_group"):
        meta.update({"expert_group_count": config["n_group"], "expert_group_used_count": config["topk_group"]})
    if config.get("scoring_func") == "sigmoid":
        meta.update({"expert_gating_func": 2, "expert_weights_norm": config["norm_topk_prob"]})
    if kv_form == "kv_b":  # older files: per-head lengths, every head its own kv head, the routing spelled out
        view = {**config, "head_dim": nope + rope}
        meta.update({"attention.value_length": v})
        meta.setdefault("expert_weights_norm", False)
        meta.setdefault("expert_gating_func", 1)
    else:
        view = {**config, "num_key_value_heads": 1, "head_dim": rank + rope}
        meta.update({"attention.value_length": rank, "attention.key_length_mla": nope + rope,
                     "attention.value_length_mla": v})
    meta.update(meta_changes or {})
    path = tmp_path / f"tiny-deepseek-{case}.gguf"
    write_typed_gguf(path, stored, view, "deepseek2", tokenizer_metadata(ensure_demo_model()), encode,
                     names=deepseek_gguf_name, extra={f"deepseek2.{k}": x for k, x in meta.items()})
    return path, model


@pytest.mark.parametrize("case", sorted(DEEPSEEK_CASES))
def test_deepseek_v2_converts_to_the_same_model(tmp_path, case):
    from mlx_lm import load

    path, reference = build_deepseek(case, tmp_path)
    out = gguf.ensure_converted(path, "float32")
    conf = json.loads((out / "config.json").read_text())
    assert conf["model_type"] == DEEPSEEK_CASES[case][0].get("model_type", "deepseek_v2")
    assert conf["rope_scaling"]["factor"] == 40.0
    model, _ = load(str(out))
    assert not any(k.endswith((".k_b.weight", ".v_b.weight")) for k in json.loads(
        (out / "model.safetensors.index.json").read_text())["weight_map"])
    ids = list(range(30, 50))
    want, got = reference(mx.array([ids]))[0], model(mx.array([ids]))[0]
    assert mx.allclose(got, want, atol=1e-4).item(), mx.abs(got - want).max().item()
    assert greedy(model, ids) == greedy(reference, ids)


@pytest.mark.parametrize("case", ["v2-lite-split", "v3-split"])
def test_deepseek_split_kv_b_kept_quantized(tmp_path, case):
    """k_b / v_b stored Q8_0 come out as 8-bit MLX weights: joined into kv_b_proj first (deepseek_v2), or as
    they are (deepseek_v3's embed_q / unembed_out); the router's weight, a plain array in mlx-lm's classes,
    stays a float."""
    import gguf as gguf_package
    from mlx_lm import load

    q8 = gguf_package.GGMLQuantizationType.Q8_0
    path, _ = build_deepseek(case, tmp_path, lambda name, a: (gguf_package.quants.quantize(a, q8), q8)
                             if a.ndim >= 2 and a.shape[-1] % 32 == 0 else None)
    out = gguf.ensure_converted(path, "quantized")
    conf = json.loads((out / "config.json").read_text())
    assert conf["quantization"]["bits"] == 8
    model, _ = load(str(out))
    exact, _ = load(str(gguf.ensure_converted(path, "float32")))  # what the Q8_0 blocks stand for
    for layer, plain in zip(model.layers, exact.layers):
        for part in ("kv_b_proj", "embed_q", "unembed_out"):
            if hasattr(plain.self_attn, part):
                q, want = getattr(layer.self_attn, part), getattr(plain.self_attn, part).weight
                got = mx.dequantize(q.weight, q.scales, q.biases, group_size=32, bits=8)
                assert mx.abs(got - want).max().item() < 0.01 * mx.abs(want).max().item()
    assert model.layers[1].mlp.gate.weight.dtype == mx.float16
    ids = list(range(30, 50))
    want = exact(mx.array([ids]))[0, :3]  # before routing and rounding differences pile up along the text
    assert mx.abs(model(mx.array([ids]))[0, :3] - want).max().item() < 0.05 * mx.abs(want).max().item()


@pytest.mark.parametrize("meta_changes, message", [
    ({"expert_gating_func": 2}, "sigmoid expert routing without its selection bias"),
    ({"expert_gating_func": 3}, "expert_gating_func 3 is not supported"),
    ({"expert_weights_norm": True}, "expert_weights_norm"),
])
def test_deepseek_routing_mlx_lm_cannot_compute_is_refused(tmp_path, meta_changes, message):
    path, _ = build_deepseek("v2-lite-split", tmp_path, meta_changes=meta_changes)
    with pytest.raises(gguf.UnsupportedGGUF, match=message):
        gguf.ensure_converted(path, "float32")
