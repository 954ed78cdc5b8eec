"""A filled-in middle ends where the model says so: CodeLlama closes an infill with its end-of-infill token
(``▁<EOT>``), not its end of sequence; without it as a stop, an editor's completion ran on past the gap."""

from __future__ import annotations

import shutil

from transformers import AutoTokenizer

from tinytitan.demo_model import ensure_demo_model
from tinytitan.engine.backends.mlx import MLXBackend

CODELLAMA = ("\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", "\u2581<EOT>")


def test_codellamas_end_of_infill_token_ends_generation(tmp_path):
    src, out = ensure_demo_model(), tmp_path / "m"
    out.mkdir()
    for f in src.iterdir():
        if f.name == "model.safetensors":
            (out / f.name).symlink_to(f)
        else:
            shutil.copy(f, out / f.name)
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_special_tokens({"additional_special_tokens": list(CODELLAMA)})
    tok.save_pretrained(out)
    backend = MLXBackend(out, "m", lazy=True)
    vocab = backend.tokenizer.get_vocab()
    assert backend.fim_tokens == CODELLAMA[:3]
    assert vocab[CODELLAMA[3]] in backend.tokenizer.eos_token_ids
    assert vocab[CODELLAMA[0]] not in backend.tokenizer.eos_token_ids
