"""Write small GGUF files for the tests: an mlx-lm model's weights under llama.cpp's tensor names, with the
metadata llama.cpp's converter writes (architecture keys, the BPE vocabulary, merges, chat template).

``make_gguf``: the demo model (or a random tiny Llama) as a GGUF. The fixtures of the GGUF tests, used by the
modules that import them by name: ``cache`` (autouse: a conversion cache of each test's own) and ``demo_dir``."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from tinytitan.demo_model import ensure_demo_model

_TO_GGUF = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def gguf_name(name: str) -> str:
    module, _, suffix = name.rpartition(".")
    if module in _TOP:
        return f"{_TOP[module]}.{suffix}"
    _, _, n, rest = module.split(".", 3)
    return f"blk.{n}.{_TO_GGUF[rest]}.{suffix}"


def permute(w: mx.array, n_head: int) -> mx.array:
    """llama.cpp's convert_hf_to_gguf permutation of a Llama's Q/K rows (for the interleaved RoPE)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_metadata(model_dir: Path, pre: str = "qwen2") -> dict:
    tj = json.loads((model_dir / "tokenizer.json").read_text())
    tc = json.loads((model_dir / "tokenizer_config.json").read_text())
    vocab = dict(tj["model"]["vocab"])
    types = {}
    for t in tj["added_tokens"]:
        vocab[t["content"]] = t["id"]
        types[t["id"]] = 3 if t["special"] else 4
    tokens = [None] * len(vocab)
    for tok, i in vocab.items():
        tokens[i] = tok
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": mx.array([types.get(i, 1) for i in range(len(tokens))], dtype=mx.int32),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.eos_token_id": mx.array(vocab[tc["eos_token"]], dtype=mx.uint32),
    }
    if tc.get("chat_template"):
        meta["tokenizer.chat_template"] = tc["chat_template"]
    return meta


def write_gguf(path: Path, weights: dict, config: dict, arch: str, tok_meta: dict) -> Path:
    """``weights`` in mlx-lm names and HF layout; a Llama's Q/K are permuted as llama.cpp stores them. A key of
    ``tok_meta`` given None is left out of the file (an architecture key too)."""
    out = {}
    for name, w in weights.items():
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config["num_attention_heads"] if "q_proj" in name else config["num_key_value_heads"]
            w = permute(w, heads)
        out[gguf_name(name)] = w
    u32 = lambda v: mx.array(v, dtype=mx.uint32)  # noqa: E731
    meta = {
        "general.architecture": arch,
        f"{arch}.block_count": u32(config["num_hidden_layers"]),
        f"{arch}.context_length": u32(config["max_position_embeddings"]),
        f"{arch}.embedding_length": u32(config["hidden_size"]),
        f"{arch}.feed_forward_length": u32(config["intermediate_size"]),
        f"{arch}.attention.head_count": u32(config["num_attention_heads"]),
        f"{arch}.attention.head_count_kv": u32(config["num_key_value_heads"]),
        f"{arch}.attention.key_length": u32(config["head_dim"]),
        f"{arch}.attention.layer_norm_rms_epsilon": mx.array(config["rms_norm_eps"], dtype=mx.float32),
        f"{arch}.rope.freq_base": mx.array(config["rope_theta"], dtype=mx.float32),
        **tok_meta,
    }
    mx.save_gguf(str(path), out, {k: v for k, v in meta.items() if v is not None})  # (None: a key left out)
    return path


def retype_tensor(path: Path, tensor: str, ggml_type: int) -> None:
    """Rewrite one tensor's storage type in the header (to see a type the converter must refuse)."""
    data = bytearray(path.read_bytes())
    needle = struct.pack("<Q", len(tensor)) + tensor.encode()
    at = data.index(needle) + len(needle)
    n_dims = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, ggml_type)
    path.write_bytes(bytes(data))


def write_quantized_gguf(path: Path, weights: dict, config: dict, arch: str, tok_meta: dict, qtype: str) -> dict:
    """As ``write_gguf``, with every 2-D weight stored as ``qtype`` (Q4_0, Q4_1, Q8_0 …) by the ``gguf``
    package (llama.cpp's own Python writer and quantizer); returns the float weights those quantized blocks
    stand for (dequantized, in HF layout): the model the converted directory must compute."""
    import gguf

    kind = gguf.GGMLQuantizationType[qtype]
    return write_typed_gguf(path, weights, config, arch, tok_meta,
                            lambda name, a: (gguf.quants.quantize(a, kind), kind) if a.ndim == 2 else None)


def add_metadata(w, arch: str, config: dict, tok_meta: dict, extra: dict | None = None) -> None:
    """The architecture keys llama.cpp's converter writes, the tokenizer's, and ``extra`` (key: value)."""
    w.add_uint32(f"{arch}.block_count", config["num_hidden_layers"])
    w.add_uint32(f"{arch}.context_length", config.get("max_position_embeddings", 4096))
    w.add_uint32(f"{arch}.embedding_length", config["hidden_size"])
    w.add_uint32(f"{arch}.feed_forward_length", config["intermediate_size"])
    w.add_uint32(f"{arch}.attention.head_count", config["num_attention_heads"])
    w.add_uint32(f"{arch}.attention.head_count_kv", config["num_key_value_heads"])
    w.add_uint32(f"{arch}.attention.key_length", config.get("head_dim") or config["hidden_size"] //
                 config["num_attention_heads"])
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    w.add_float32(f"{arch}.rope.freq_base", config.get("rope_theta", 10000.0))
    for key, v in {**tok_meta, **(extra or {})}.items():
        if isinstance(v, str):
            w.add_string(key, v)
        elif isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, int):
            w.add_uint32(key, v)
        elif isinstance(v, list):
            w.add_array(key, v)
        elif v.ndim:
            w.add_array(key, [int(x) for x in v.tolist()])
        else:
            w.add_uint32(key, int(v.item()))


def write_typed_gguf(path: Path, weights: dict, config: dict, arch: str, tok_meta: dict, encode,
                     names=gguf_name, extra: dict | None = None, tensors: dict | None = None) -> dict:
    """A GGUF written by the ``gguf`` package's ``GGUFWriter``: ``encode(name, float32 array)`` returns
    ``(raw blocks, GGMLQuantizationType)`` for a tensor to store quantized, or None to store it as float32;
    ``names`` maps an mlx-lm name to the GGUF one; ``tensors``: more GGUF tensors as they are. Returns the
    float weights the stored tensors stand for (dequantized by the gguf package, in HF layout)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    add_metadata(w, arch, config, tok_meta, extra)
    reference = {}
    for name, t in weights.items():
        a = np.array(t.astype(mx.float32))
        coded = encode(name, a)
        if coded is None:
            reference[name] = t
            w.add_tensor(names(name), a)
            continue
        q, kind = coded
        reference[name] = mx.array(gguf.quants.dequantize(q, kind).reshape(a.shape))
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config["num_attention_heads"] if "q_proj" in name else config["num_key_value_heads"]
            q = np.array(permute(mx.array(q), heads))  # rows move whole: blocks run along a row
        w.add_tensor(names(name), q, raw_dtype=kind)
    for name, a in (tensors or {}).items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return reference


def demo_gguf_bytes(tmp_path: Path, with_template: bool = True) -> bytes:
    """The demo model as a qwen3 GGUF (its chat template in the header, or not), as bytes: a library's blob."""
    from tinytitan.demo_model import ensure_demo_model

    demo = Path(ensure_demo_model())
    meta = tokenizer_metadata(demo)
    if not with_template:
        meta.pop("tokenizer.chat_template")
    return write_gguf(tmp_path / "m.gguf", mx.load(str(demo / "model.safetensors")),
                      json.loads((demo / "config.json").read_text()), "qwen3", meta).read_bytes()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def demo_dir():
    return ensure_demo_model()


def random_llama(demo_dir):
    """A random tiny Llama with the demo tokenizer (HF layout, standard RoPE)."""
    from mlx_lm.models import llama

    config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 96,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5,
              "vocab_size": 4096, "rope_theta": 10000.0, "max_position_embeddings": 2048,
              "tie_word_embeddings": False}
    mx.random.seed(7)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    return config, dict(tree_flatten(model.parameters()))


def _qwen3(demo_dir):
    config = json.loads((demo_dir / "config.json").read_text())
    return config, mx.load(str(demo_dir / "model.safetensors"))


def make_gguf(path, demo_dir, arch="qwen3", **meta_changes):
    config, weights = (random_llama if arch == "llama" else _qwen3)(demo_dir)
    meta = tokenizer_metadata(demo_dir)
    meta.update(meta_changes)  # (a key given None is left out of the file: write_gguf)
    return write_gguf(path, weights, config, arch, meta), config, weights
