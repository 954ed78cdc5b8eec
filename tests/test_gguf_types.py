"""Every GGUF storage type the gguf package dequantizes, converted: K-quant blocks made from known floats read
back within their rounding step, and through a model, in each form; every other type read exactly as the gguf
package dequantizes it."""

from __future__ import annotations

import json

import gguf as gguf_package
import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from gguf_util import tokenizer_metadata, write_typed_gguf
from kquant_blocks import ENCODERS, random_blocks, step_bound
from tinytitan.demo_model import ensure_demo_model
from tinytitan.models import gguf
from tinytitan.models.gguf_tensors import MLX_NATIVE, dequantizable

T = gguf_package.GGMLQuantizationType


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def demo_dir():
    return ensure_demo_model()


def tiny_llama(hidden=256, ff=256, layers=2):
    """A random Llama whose rows are whole 256-value K-quant super-blocks."""
    from mlx_lm.models import llama

    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": ff,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": hidden // 4, "rms_norm_eps": 1e-5,
              "vocab_size": 4096, "rope_theta": 10000.0, "max_position_embeddings": 2048,
              "tie_word_embeddings": False}
    mx.random.seed(11)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    return config, dict(tree_flatten(model.parameters()))


def reference_model(tmp_path, config, weights):
    from mlx_lm.utils import load_model

    d = tmp_path / "reference"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(d / "model.safetensors"), weights)
    return load_model(d)[0]


def converted_weights(out):
    weights = {}
    for f in sorted(out.glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    return weights


def test_every_dequantizable_type_is_accepted():
    assert {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XXS", "TQ2_0", "MXFP4"} <= dequantizable()


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_k_quant_blocks_read_back_within_their_step(kind):
    x = np.random.default_rng(3).standard_normal((16, 512)).astype(np.float32) * 0.05
    blocks = ENCODERS[kind](x)
    back = gguf_package.quants.dequantize(blocks, T[kind])
    assert back.shape == x.shape
    assert np.abs(back - x).max() <= step_bound(x, kind)
    other = "Q6_K" if kind == "Q4_K" else "Q4_K"  # the same bytes read as the other layout are far off
    assert gguf_package.GGML_QUANT_SIZES[T[other]][1] != gguf_package.GGML_QUANT_SIZES[T[kind]][1]


@pytest.mark.parametrize("kind, bits", [("Q4_K", 4), ("Q6_K", 8)])
def test_k_quant_model_converts_in_every_form(tmp_path, demo_dir, kind, bits):
    """Q4_K / Q6_K weights (embedding and output included, as a Q4_K_M file has them): float32 and float16
    compute what the blocks stand for; quantized keeps MLX's 4 or 8 bits, and errs about as much as MLX's own
    quantization of the same floats (requantizing to 4 bits adds about the error the 4-bit blocks had)."""
    import mlx.nn as nn
    from mlx_lm import load

    config, weights = tiny_llama()
    path = tmp_path / f"tiny-{kind}.gguf"
    encode = lambda name, a: (ENCODERS[kind](a), T[kind]) if a.ndim == 2 else None  # noqa: E731
    ref_weights = write_typed_gguf(path, weights, config, "llama", tokenizer_metadata(demo_dir), encode)
    assert {t.type for t in gguf.read_header(path)[1] if len(t.shape) == 2} == {kind}
    reference = reference_model(tmp_path, config, ref_weights)
    ids = list(range(5, 40))
    want = reference(mx.array([ids]))[0]
    nn.quantize(reference, group_size=32, bits=bits)
    mlx_own = mx.abs(reference(mx.array([ids]))[0] - want).max().item()
    for form, tol in (("float32", 1e-4), ("float16", 2e-2), ("quantized", 2.5 * mlx_own)):
        out = gguf.ensure_converted(path, form)
        conf = json.loads((out / "config.json").read_text())
        assert (conf.get("quantization") or {}).get("bits") == (bits if form == "quantized" else None)
        model, _ = load(str(out))
        got = model(mx.array([ids]))[0]
        diff = mx.abs(got.astype(mx.float32) - want).max().item()
        assert diff < tol * (1 if form == "quantized" else max(1.0, mx.abs(want).max().item())), (form, diff)
        stored = converted_weights(out)["model.layers.0.mlp.up_proj.weight"]
        assert stored.dtype == {"float32": mx.float32, "float16": mx.float16, "quantized": mx.uint32}[form]


OTHER_TYPES = sorted(dequantizable() - MLX_NATIVE - set(ENCODERS))


def test_every_other_type_reads_as_the_gguf_package_dequantizes_it(tmp_path, demo_dir):
    """One file with a matrix in each other type (random blocks): float32 is exactly what the gguf package
    dequantizes; quantized is MLX's 4 or 8 bits of it, within a step of each group's own grid."""
    config, weights = tiny_llama(layers=4)
    slots = sorted(n for n in weights if n.startswith("model.layers.") and weights[n].ndim == 2
                   and not n.endswith(("q_proj.weight", "k_proj.weight")))  # (stored permuted, as llama.cpp does)
    assert len(slots) >= len(OTHER_TYPES)
    kinds = dict(zip(slots, OTHER_TYPES))
    path = tmp_path / "tiny-types.gguf"

    def encode(name, a):
        return (random_blocks(T[kinds[name]], *a.shape), T[kinds[name]]) if name in kinds else None

    ref = write_typed_gguf(path, weights, config, "llama", tokenizer_metadata(demo_dir), encode)
    assert {t.type for t in gguf.read_header(path)[1]} >= set(OTHER_TYPES)
    exact = converted_weights(gguf.ensure_converted(path, "float32"))
    stored = converted_weights(gguf.ensure_converted(path, "quantized"))
    for name, kind in kinds.items():
        want = np.array(ref[name])
        assert np.array_equal(np.array(exact[name]), want), kind
        module = name[:-len(".weight")]
        bits = 8 if kind in ("Q5_0", "Q5_1", "Q5_K") else 4
        q = mx.dequantize(stored[name], stored[f"{module}.scales"], stored[f"{module}.biases"], group_size=32,
                          bits=bits)
        # within a step of each group's own grid (MLX keeps zero exact), and the float16 rounding of its scale
        groups = want.reshape(-1, 32)
        err = np.abs(np.array(q.astype(mx.float32)).reshape(-1, 32) - groups).max(axis=1)
        bound = np.ptp(groups, axis=1) / (2 ** bits - 1) * 1.05 + 2e-3 * np.abs(groups).max(axis=1) + \
            2 ** bits * 6e-8  # (subnormal half floats)
        assert (err <= bound).all(), (kind, (err - bound).max())


def test_conversion_is_sharded_and_shows_progress(tmp_path, demo_dir, monkeypatch, caplog):
    import logging

    from tinytitan.models import gguf_tensors

    config, weights = tiny_llama()
    path = tmp_path / "tiny.gguf"
    write_typed_gguf(path, weights, config, "llama", tokenizer_metadata(demo_dir),
                     lambda name, a: (ENCODERS["Q4_K"](a), T.Q4_K) if a.ndim == 2 else None)
    monkeypatch.setattr(gguf_tensors, "SHARD_BYTES", 1 << 20)
    caplog.set_level(logging.INFO, logger="tinytitan.gguf")
    out = gguf.ensure_converted(path, "float32")
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 3 and shards[0] == "model-00001.safetensors"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert "converting tiny.gguf: 100% (" in caplog.text
    source = json.loads((out / "gguf_source.json").read_text())
    assert source["quantization"] == "Q4_K" and source["digest"] == "sha256:" + gguf.file_digest(path)
    n = sum(int(np.prod(w.shape)) for w in weights.values())
    assert source["parameters"] == n


def test_a_file_mlx_cannot_read_still_converts_quantized(tmp_path, demo_dir):
    """Q8_0 beside an IQ type mlx's own loader rejects: every tensor comes through the gguf package instead
    (the Q8_0 ones requantized to 8 bits)."""
    config, weights = tiny_llama(layers=1)

    def encode(name, a):
        if name == "model.layers.0.mlp.up_proj.weight":
            return random_blocks(T.IQ2_XXS, *a.shape), T.IQ2_XXS
        return (gguf_package.quants.quantize(a, T.Q8_0), T.Q8_0) if a.ndim == 2 else None

    path = tmp_path / "mixed.gguf"
    ref = write_typed_gguf(path, weights, config, "llama", tokenizer_metadata(demo_dir), encode)
    stored = converted_weights(gguf.ensure_converted(path, "quantized"))
    w = stored["model.layers.0.mlp.down_proj.weight"]
    assert w.dtype == mx.uint32 and w.shape[-1] * 32 // 8 == ref["model.layers.0.mlp.down_proj.weight"].shape[-1]
