"""The demo model's recipe: variants, special tokens, seeds, and the hash of all of it.

``recipe_version(variant)`` names the cache directory, so everything that determines the built files must feed it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict

from .template import CHAT_TEMPLATE

# Bump when the build changes in a way the constants below do not capture (it is part of the recipe hash).
RECIPE_REVISION = 1
SEED = 20240611
INIT_STD = 0.02

# Special tokens (single ids, skipped by skip_special_tokens) and added non-special tokens (survive decode).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Qwen2 / Qwen3 pre-tokenizer regex (also what transformers' Qwen2Tokenizer rebuilds), so that the
# tokenizer behaves the same whether loaded as Qwen2Tokenizer or PreTrainedTokenizerFast.
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

_COMMON_MODEL = {
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
}

VARIANTS: Dict[str, Dict[str, Any]] = {
    "demo": {
        "model_id": "tinytitan-demo",
        "model": dict(
            hidden_size=64,
            num_hidden_layers=2,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            vocab_size=4096,
            **_COMMON_MODEL,
        ),
        # corpus: characters of generated text, number of pseudo-words in the lexicon
        "corpus": {"chars": 400_000, "pseudo_words": 600},
    },
    "50m": {
        "model_id": "tinytitan-demo-50m",
        "model": dict(
            hidden_size=512,
            num_hidden_layers=8,
            intermediate_size=2048,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=64,
            vocab_size=32000,
            **_COMMON_MODEL,
        ),
        "corpus": {"chars": 2_400_000, "pseudo_words": 12_000},
    },
}


def _variant(variant: str) -> Dict[str, Any]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ValueError(f"unknown demo model variant {variant!r}; expected one of {sorted(VARIANTS)}") from None


def demo_model_id(variant: str = "demo") -> str:
    """The model id the server reports for the demo model: ``tinytitan-demo`` / ``tinytitan-demo-50m``."""
    return _variant(variant)["model_id"]


def recipe_version(variant: str = "demo") -> str:
    """A short hash of everything that determines the built files (bump RECIPE_REVISION for code changes)."""
    recipe = {
        "revision": RECIPE_REVISION,
        "seed": SEED,
        "init": f"uniform; embed std {INIT_STD}; proj std fan_in**-0.5; norms 1; float32",
        "variant": variant,
        "spec": _variant(variant),
        "special": SPECIAL_TOKENS,
        "added": ADDED_TOKENS,
        "regex": PRETOKENIZE_REGEX,
        "template": CHAT_TEMPLATE,
    }
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
