"""GGUF files and Hugging Face repo ids as ``--model``: conversion, refusals, the cache, listing.

The GGUFs here are written by the test from small random models (gguf_util: llama.cpp's tensor names and
metadata, a Llama's Q/K permuted as llama.cpp stores them), so a converted model can be compared with the model
it came from logit for logit. The real quantized GGUF (SmolLM2) is tested in test_real_model.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil

import mlx.core as mx
import numpy as np
import pytest

from gguf_util import random_llama, make_gguf, retype_tensor, tokenizer_metadata, write_gguf, write_quantized_gguf
from gguf_util import cache, demo_dir  # noqa: F401  (the fixtures: a conversion cache per test, the demo model)
from tinytitan import model_setup
from tinytitan.models import gguf
from tinytitan.models.resolve import ModelNotFound, list_models, resolve

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2? <think>"}]


def logits(model, ids):
    return model(mx.array([ids]))[0]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_converted_model_is_the_model_it_came_from(tmp_path, demo_dir, arch):
    from mlx_lm import load
    from mlx_lm.utils import load_model

    path, config, weights = make_gguf(tmp_path / f"tiny-{arch}.gguf", demo_dir, arch)
    out = gguf.ensure_converted(path, "float32")
    model, tok = load(str(out))
    _, demo_tok = load(str(demo_dir))
    # the tokenizer and template rebuilt from the metadata are the originals
    text = demo_tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    assert tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False) == text
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == demo_tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    # ... and the weights compute what the original computes (for a Llama: un-permuted by traditional RoPE)
    conf = json.loads((out / "config.json").read_text())
    assert conf["rope_traditional"] is (arch == "llama")
    assert conf["max_position_embeddings"] == config["max_position_embeddings"]  # the context window
    original = tmp_path / "original"
    original.mkdir()
    (original / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(original / "model.safetensors"), weights)
    reference, _ = load_model(original)
    assert mx.allclose(logits(model, ids), logits(reference, ids), atol=1e-4).item()


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0"])
def test_quantized_gguf_stays_quantized_and_computes_its_blocks(tmp_path, demo_dir, qtype):
    """A GGUF written by llama.cpp's own Python package (gguf), its 2-D weights quantized: kept quantized, the
    converted model computes what the dequantized blocks compute; dequantized to float32, the same."""
    from mlx_lm import load
    from mlx_lm.utils import load_model

    config, weights = random_llama(demo_dir)
    path = tmp_path / f"tiny-{qtype}.gguf"
    reference_weights = write_quantized_gguf(path, weights, config, "llama", tokenizer_metadata(demo_dir), qtype)
    assert {t.type for t in gguf.read_header(path)[1] if len(t.shape) == 2} == {qtype}
    original = tmp_path / "reference"
    original.mkdir()
    (original / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(original / "model.safetensors"), reference_weights)
    reference, _ = load_model(original)
    for form in ("quantized", "float32"):
        out = gguf.ensure_converted(path, form)
        conf = json.loads((out / "config.json").read_text())
        bits = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}[qtype]
        assert (conf.get("quantization") or {}).get("bits") == (bits if form == "quantized" else None)
        model, tok = load(str(out))
        ids = tok.encode("def add(a, b): return a + b", add_special_tokens=False)
        # MLX keeps each block's scale and offset in float16 (llama.cpp's dequantizer computes the offset in
        # float32): agreement to about 1e-3 of logits of order 1; a wrong layout is off by order 1
        diff = mx.abs(logits(model, ids) - logits(reference, ids)).max().item()
        assert diff < 5e-3, (form, diff)


def test_the_cache_is_keyed_by_digest_and_reused(tmp_path, demo_dir, cache, caplog):
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir)
    first = gguf.ensure_converted(path, "float32")
    assert first.parent.parent == cache and gguf.file_digest(path)[:16] in first.name
    caplog.set_level(logging.INFO, logger="tinytitan.gguf")
    assert gguf.ensure_converted(path, "float32") == first
    assert "using the converted model" in caplog.text and "converting" not in caplog.text
    assert gguf.ensure_converted(path, "quantized") != first  # the other form is another directory
    shutil.copy(path, tmp_path / "copy.gguf")
    assert gguf.cached_dir(tmp_path / "copy.gguf", "float32").name.split("-")[1] == first.name.split("-")[1]
    # the digest is remembered per path, size and mtime; a changed file is hashed again
    import hashlib

    assert len(json.loads((cache / "gguf" / "digests.json").read_text())) == 2
    path.write_bytes(path.read_bytes() + b"\0")
    assert gguf.file_digest(path) == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("change, named", [
    ({"general.architecture": "mamba"}, "architecture 'mamba' is not supported"),
    ({"tokenizer.chat_template": None}, "has no chat template"),
    ({"tokenizer.ggml.model": "rwkv"}, "tokenizer.ggml.model 'rwkv' is not supported"),
    ({"tokenizer.ggml.pre": "deepseek-coder"}, "tokenizer.ggml.pre 'deepseek-coder' is not supported"),
])
def test_refused_by_name(tmp_path, demo_dir, change, named, cache):
    arch = change.pop("general.architecture", "qwen3")
    path, config, weights = make_gguf(tmp_path / "bad.gguf", demo_dir, **change)
    if arch != "qwen3":
        meta = tokenizer_metadata(demo_dir)
        path = write_gguf(tmp_path / "bad.gguf", weights, config, arch, meta)
    with pytest.raises(gguf.UnsupportedGGUF, match=named):
        gguf.ensure_converted(path, "float32")
    assert not [p for p in (cache / "gguf").iterdir() if p.is_dir()]  # no directory, not even half-written


def test_a_type_the_gguf_package_cannot_read_is_refused_not_guessed(tmp_path, demo_dir):
    path, _, _ = make_gguf(tmp_path / "k.gguf", demo_dir)
    retype_tensor(path, "blk.1.ffn_down.weight", 15)  # Q8_K: llama.cpp's intermediate type, no dequantizer
    with pytest.raises(gguf.UnsupportedGGUF, match=r"quantization Q8_K \(e.g. blk.1.ffn_down.weight\) is not "
                                                   r"supported: the gguf package cannot dequantize it"):
        gguf.check(path)


def hf_cache(root, demo_dir, repo="acme/tiny-chat", rev="0123456789abcdef0123456789abcdef01234567"):
    """A Hugging Face cache as huggingface_hub lays it out: blobs, a snapshot of symlinks, refs/main."""
    repo_dir = root / f"models--{repo.replace('/', '--')}"
    snap = repo_dir / "snapshots" / rev
    (repo_dir / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in demo_dir.iterdir():
        if f.is_file():
            blob = repo_dir / "blobs" / f"{abs(hash(f.name)):x}"
            shutil.copy(f, blob)
            (snap / f.name).symlink_to(blob)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    return snap


def test_hf_repo_id_served_from_the_cache_offline(tmp_path, demo_dir, monkeypatch):
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    snap = hf_cache(hub, demo_dir)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = resolve("acme/tiny-chat")
    assert found.path == snap and found.model_id == "acme/tiny-chat"
    with pytest.raises(ModelNotFound, match="acme/absent: not in the Hugging Face cache, and HF_HUB_OFFLINE"):
        resolve("acme/absent")
    args = argparse.Namespace(script=None, models_dir=None, model="acme/tiny-chat", model_id=None,
                              gguf_form="auto", prompt_cache_mib=64, reasoning_effort=None, thinking=None)
    (backend,) = model_setup.make_backends(args)
    assert backend.model_id == "acme/tiny-chat" and backend.loaded


def test_models_dir_lists_mlx_dirs_gguf_files_and_an_hf_cache(tmp_path, demo_dir):
    root = tmp_path / "models"
    shutil.copytree(demo_dir, root / "local" / "demo")
    make_gguf(root / "tiny-llama.gguf", demo_dir, "llama")
    make_gguf(root / "broken.gguf", demo_dir, **{"tokenizer.chat_template": None})  # left out, with a warning
    snap = hf_cache(root, demo_dir)
    gguf_repo = root / "models--acme--tiny-GGUF" / "snapshots" / snap.name  # a GGUF repo in the HF cache
    gguf_repo.mkdir(parents=True)
    shutil.copy(root / "tiny-llama.gguf", gguf_repo / "tiny-Q8_0.gguf")
    found = list_models(root, "float32")
    assert [m.model_id for m in found] == ["acme/tiny-GGUF/tiny-Q8_0", "acme/tiny-chat", "local/demo",
                                           "tiny-llama"]
    assert (found[2].path / "config.json").is_file()


def test_model_argument_errors(tmp_path):
    with pytest.raises(ModelNotFound, match="no such file"):
        resolve(str(tmp_path / "absent.gguf"))
    (tmp_path / "named.gguf").mkdir()  # a directory named like a file: said as a directory, not "no such file"
    with pytest.raises(ModelNotFound, match="is not an MLX model directory"):
        resolve(str(tmp_path / "named.gguf"))
    with pytest.raises(ModelNotFound, match=r"not a model directory, a .gguf file, .* \(smollm2, demo-vision\)"):
        resolve("not a model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="no config.json"):
        resolve(str(tmp_path / "empty"))


@pytest.mark.skipif(mx.metal.is_available(), reason="with a GPU a GGUF always stays quantized")
def test_float32_only_where_it_fits(tmp_path, demo_dir, monkeypatch):
    path, config, _ = make_gguf(tmp_path / "m.gguf", demo_dir)
    need = gguf.float32_bytes(path)
    assert need == 4 * sum(int(np.prod(w.shape)) for w in mx.load(str(path)).values())
    monkeypatch.setattr(gguf, "physical_memory", lambda: need * 8)
    assert gguf.preferred_form(path) == "float32"
    monkeypatch.setattr(gguf, "physical_memory", lambda: need * 2)
    assert gguf.preferred_form(path) == "quantized"
