"""SentencePiece vocabularies (``tokenizer.ggml.model == "llama"``: Llama 2, Mistral, Gemma) rebuilt from a
GGUF's metadata and checked against the original SentencePiece model, text for text.

The original here is a small BPE SentencePiece model the test trains (the ``sentencepiece`` package, with byte
fallback, as Llama 2's and Mistral's are), written into GGUF metadata the way llama.cpp's converter writes it
(pieces, scores, token types); with and without the dummy space prefix (Gemma has none).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest

from tinytitan.models.gguf_tokenizer import build_tokenizer

from conftest import imported

spm = imported("sentencepiece", "sentencepiece (a test extra) is not installed")

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [
    "Hello world", " leading space", "two  spaces and\ttabs", "line one\nline two\n\n", "numbers 12345 and 3.14",
    "café naïve résumé", "日本語のテキスト", "emoji 🦙 and 🚀!", "def add(a, b):\n    return a + b\n",
    "mixedCASE_identifiers->arrows", "", " ", "trailing space ",
]


def train(tmp_path: Path, prefix: bool) -> "spm.SentencePieceProcessor":
    corpus = tmp_path / "corpus.txt"
    lines = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus.write_text("\n".join(lines[:800]), encoding="utf-8")
    prefix_name = tmp_path / ("spm" if prefix else "spm_noprefix")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix_name), vocab_size=600, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, add_dummy_prefix=prefix, user_defined_symbols=["<tool>"],
        control_symbols=["[INST]", "[/INST]"], minloglevel=2, num_threads=1,
        remove_extra_whitespaces=False, normalization_rule_name="identity")
    return spm.SentencePieceProcessor(model_file=f"{prefix_name}.model")


def gguf_metadata(sp, prefix: bool) -> dict:
    """What llama.cpp's convert_hf_to_gguf.py (_create_vocab_sentencepiece) writes for this model."""
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                     else 6 if sp.is_byte(i) else 4 if sp.id_to_piece(i) == "<tool>" else 1)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": sp.bos_id(),
            "tokenizer.ggml.eos_token_id": sp.eos_id(), "tokenizer.ggml.unknown_token_id": sp.unk_id(),
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_space_prefix": prefix}


@pytest.mark.parametrize("prefix", [True, False])
def test_rebuilt_sentencepiece_tokenizes_as_the_original(tmp_path, prefix):
    sp = train(tmp_path, prefix)
    tok, specials = build_tokenizer(gguf_metadata(sp, prefix))
    assert specials["bos"] == "<s>" and specials["eos"] == "</s>" and specials["unknown"] == "<unk>"
    corpus = TEXTS + (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[800:1000]
    for text in corpus:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == sp.encode(text), text
        assert tok.decode(ids) == sp.decode(ids), text
    # BOS as the file asks; control tokens are one token each, and a space follows them as llama.cpp adds it
    assert tok.encode("Hi").ids == [sp.bos_id(), *sp.encode("Hi")]
    inst = sp.piece_to_id("[INST]")
    got = tok.encode("[INST]Hi", add_special_tokens=False).ids
    assert got == [inst, *sp.encode("Hi")]
    tool = sp.piece_to_id("<tool>")  # a user-defined piece: one token, never split
    assert tok.encode("a<tool>b", add_special_tokens=False).ids.count(tool) == 1
    assert sp.encode("a<tool>b").count(tool) == 1


def test_byte_fallback_round_trips(tmp_path):
    sp = train(tmp_path, True)
    tok, _ = build_tokenizer(gguf_metadata(sp, True))
    text = "Ωmega ∑ ✓ 🦙 \u00a0nbsp"
    ids = tok.encode(text, add_special_tokens=False).ids
    assert any(sp.is_byte(i) for i in ids)  # characters the vocabulary lacks become byte tokens
    assert tok.decode(ids) == text


def test_a_gguf_with_a_sentencepiece_vocabulary_serves(tmp_path, monkeypatch):
    """A tiny Llama with the SentencePiece vocabulary: converted, loaded by mlx-lm, its tokenizer the
    original's, its chat template applied."""
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.models import llama

    from gguf_util import write_typed_gguf
    from tinytitan.models import gguf

    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    sp = train(tmp_path, True)
    meta = gguf_metadata(sp, True)
    meta["tokenizer.chat_template"] = ("{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]"
                                       "{% endfor %}")
    config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "intermediate_size": 96,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5,
              "vocab_size": sp.get_piece_size(), "rope_theta": 10000.0, "max_position_embeddings": 2048,
              "tie_word_embeddings": True}
    mx.random.seed(3)
    weights = dict(tree_flatten(llama.Model(llama.ModelArgs.from_dict(config)).parameters()))
    path = tmp_path / "spm-llama.gguf"
    write_typed_gguf(path, weights, config, "llama", meta, lambda n, a: None)
    out = gguf.ensure_converted(path, "float32")
    model, tok = load(str(out))
    text = "café naïve 🦙 def add(a, b)"
    assert tok.encode(text) == [sp.bos_id(), *sp.encode(text)]
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert prompt == "<s>[INST] Hi [/INST]"
    assert json.loads((out / "tokenizer_config.json").read_text())["unk_token"] == "<unk>"
    assert model(mx.array([tok.encode(text)])).shape[-1] == sp.get_piece_size()
