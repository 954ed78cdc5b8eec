"""A tokenizer mlx-lm streams with its naive detokenizer (as it does a ``*.tiktoken`` vocabulary): the demo
tokenizer with its ByteLevel decoder wrapped in a Sequence. It decodes the same; mlx-lm no longer recognises it.
Used by tests/test_detokenizer_window.py and tools/bench_long_answers.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlx_lm.utils import load_tokenizer

from tinytitan.demo_model import ensure_demo_model


def naive_tokenizer(out: Path):
    """Writes the tokenizer's files into ``out`` (a folder) and loads them."""
    for f in ensure_demo_model().iterdir():
        if f.suffix == ".json":
            shutil.copy(f, out / f.name)
    spec = json.loads((out / "tokenizer.json").read_text())
    spec["decoder"] = {"type": "Sequence", "decoders": [spec["decoder"]]}
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return load_tokenizer(out)
