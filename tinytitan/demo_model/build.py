"""Writing a demo model directory: tokenizer, configs, weights."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..progress import Progress
from .corpus import generate_corpus
from .recipe import _variant
from .tokenizer import _tokenizer_config, _train_tokenizer
from .weights import _model_config, _write_weights

log = logging.getLogger("tinytitan.demo_model")


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_demo_model(path, variant: str = "demo") -> Path:
    """Write the demo model directory at ``path`` (created if needed; existing files are overwritten)."""
    spec = _variant(variant)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    m = spec["model"]
    with Progress(log, f"building the {variant} model in {out}", total=3, unit="stage") as shown:
        _build(out, variant, m, shown)
    return out


def _build(out: Path, variant: str, m: dict, shown: Progress) -> None:
    shown.stage("training the tokenizer")
    tok = _train_tokenizer(m["vocab_size"], generate_corpus(variant))
    shown.update()
    tok.save(str(out / "tokenizer.json"), pretty=True)
    _write_json(out / "tokenizer_config.json", _tokenizer_config(tok))
    _write_json(
        out / "special_tokens_map.json",
        {
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
        },
    )
    shown.stage("writing the configuration")
    config = _model_config(variant, tok)
    _write_json(out / "config.json", config)
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": None,
            "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
            "pad_token_id": tok.token_to_id("<|endoftext|>"),
            "do_sample": False,
        },
    )
    shown.update()
    shown.stage("writing the weights")
    _write_weights(out / "model.safetensors", m)
    shown.update()
