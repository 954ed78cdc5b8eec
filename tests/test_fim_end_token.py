"""A filled-in middle ends where the model says so: CodeLlama closes an infill with its end-of-infill token
(``▁<EOT>``), not its end of sequence, and a Qwen-coder or StarCoder2 that goes on to its repository format's
next file (``<|file_sep|>``, ``<file_sep>``…) or pads (SantaCoder's ``<fim-pad>``) has left the gap; without
them as ends, an editor's completion ran on past the gap to max_tokens. llama.cpp's list of them is followed."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from catalog_helpers import model_dir
from tinytitan.engine.backends.mlx import MLXBackend


def served_with(tmp_path, added: list[str]) -> MLXBackend:
    """The demo model, its tokenizer given ``added`` as special tokens."""
    out = model_dir(tmp_path, lambda config: None)
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_special_tokens({"additional_special_tokens": added})
    tok.save_pretrained(out)
    return MLXBackend(out, "m", lazy=True)


@pytest.mark.parametrize("markers, ends", [
    (["\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>"], ["\u2581<EOT>"]),  # CodeLlama
    (["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"], ["<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"]),  # Qwen2.5-coder
    (["<fim_prefix>", "<fim_suffix>", "<fim_middle>"], ["<fim_pad>", "<file_sep>", "<repo_name>"]),  # StarCoder2
    (["<fim_prefix>", "<fim_suffix>", "<fim_middle>"], ["<fim_pad>", "<reponame>"]),  # StarCoder, Granite
    (["<fim-prefix>", "<fim-suffix>", "<fim-middle>"], ["<fim-pad>"]),  # SantaCoder
    # the other spellings of llama.cpp's FIM_PAD and FIM_REP (Qwen's <|fim_repo|>, Kimi-K2's [PAD]…)
    (["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"],
     ["<|fim_repo|>", "<fim-repo>", "<REPO>", "<PAD>", "[PAD]"]),
], ids=["codellama", "qwen-coder", "starcoder2", "starcoder", "santacoder", "llama.cpp-others"])
def test_the_end_of_a_filled_in_middle_ends_generation(tmp_path, markers, ends):
    backend = served_with(tmp_path, markers + ends)
    vocab = backend.tokenizer.get_vocab()
    assert backend.fim_tokens == tuple(markers)
    assert all(vocab[t] in backend.tokenizer.eos_token_ids for t in ends)
    assert not any(vocab[t] in backend.tokenizer.eos_token_ids for t in markers)
