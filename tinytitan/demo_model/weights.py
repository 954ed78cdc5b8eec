"""The demo model's config.json and its seeded float32 weights (model.safetensors, written by hand)."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any, Dict

from .recipe import INIT_STD, SEED, _variant, recipe_version


def _model_config(variant: str, tok) -> Dict[str, Any]:
    m = _variant(variant)["model"]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": tok.token_to_id("<|im_end|>"),
        "pad_token_id": tok.token_to_id("<|endoftext|>"),
        "head_dim": m["head_dim"],
        "hidden_act": "silu",
        "hidden_size": m["hidden_size"],
        "initializer_range": INIT_STD,
        "intermediate_size": m["intermediate_size"],
        "max_position_embeddings": m["max_position_embeddings"],
        "max_window_layers": m["num_hidden_layers"],
        "model_type": "qwen3",
        "num_attention_heads": m["num_attention_heads"],
        "num_hidden_layers": m["num_hidden_layers"],
        "num_key_value_heads": m["num_key_value_heads"],
        "rms_norm_eps": m["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": m["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": m["tie_word_embeddings"],
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": m["vocab_size"],
        "tinytitan_demo": {"variant": variant, "recipe": recipe_version(variant)},
    }


def _param_shapes(m: Dict[str, Any]) -> Dict[str, tuple]:
    """Parameter names/shapes of mlx_lm.models.qwen3.Model (checked against it in the tests)."""
    h, hd, ff = m["hidden_size"], m["head_dim"], m["intermediate_size"]
    nq, nkv = m["num_attention_heads"], m["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (m["vocab_size"], h), "model.norm.weight": (h,)}
    if not m["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (m["vocab_size"], h)
    for i in range(m["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (nq * hd, h),
                p + "self_attn.k_proj.weight": (nkv * hd, h),
                p + "self_attn.v_proj.weight": (nkv * hd, h),
                p + "self_attn.o_proj.weight": (h, nq * hd),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (ff, h),
                p + "mlp.up_proj.weight": (ff, h),
                p + "mlp.down_proj.weight": (h, ff),
            }
        )
    return shapes


def _write_weights(path: Path, m: Dict[str, Any]) -> int:
    """Write model.safetensors (float32, little-endian, sorted names); returns the parameter count."""
    import numpy as np

    def arrays():
        for name, shape in sorted(_param_shapes(m).items()):
            if name.endswith("norm.weight"):
                yield name, np.ones(shape, dtype="<f4")
                continue
            # uniform(-b, b) has std b / sqrt(3). Embeddings: INIT_STD. Projections: 1 / sqrt(fan_in), so every
            # layer changes the residual stream (with tied embeddings and tiny layer weights the model would just
            # repeat its last input token; this way greedy decoding wanders through the vocabulary).
            std = INIT_STD if "embed_tokens" in name or "lm_head" in name else shape[1] ** -0.5
            rng = np.random.RandomState((SEED + zlib.crc32(name.encode())) % 2**32)
            yield name, ((rng.random_sample(shape) * 2.0 - 1.0) * (std * 3.0**0.5)).astype("<f4")

    return write_safetensors(path, arrays())


def write_safetensors(path: Path, named) -> int:
    """Write ``(name, little-endian float32 array)`` pairs, in the order given, as a safetensors file with a fixed
    header (so its bytes depend only on the arrays); returns the parameter count."""
    header: Dict[str, Any] = {"__metadata__": {"format": "mlx"}}
    arrays, offset, count = [], 0, 0
    for name, a in named:
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        count += a.size
        arrays.append(a)
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for a in arrays:
            f.write(a.tobytes())
    return count
