"""A Hugging Face ``tokenizers`` tokenizer rebuilt from a GGUF's metadata.

A GGUF carries its vocabulary (``tokenizer.ggml.tokens``, ``token_type``), its BPE merges and the name of
its pre-tokenizer (``tokenizer.ggml.pre``), which stands for a fixed split regex in llama.cpp. Only
byte-level BPE (``tokenizer.ggml.model == "gpt2"``) with a pre-tokenizer named below is rebuilt; anything
else is refused by name, since a near-miss tokenizer would make a model that answers, wrongly.
"""

from __future__ import annotations

from typing import Any

# token_type values (llama.cpp's llama_token_type)
CONTROL, USER_DEFINED = 3, 4

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# tokenizer.ggml.pre -> (split regex or None for gpt2's built-in one, digits one by one, NFC, ignore_merges)
PRE_TOKENIZERS = {
    "default": (None, False, False, False),
    "gpt-2": (None, False, False, False),
    "gpt2": (None, False, False, False),
    "smollm": (None, True, False, False),
    "qwen2": (QWEN2_REGEX, False, True, False),
    "llama-bpe": (LLAMA3_REGEX, False, False, True),
    "llama3": (LLAMA3_REGEX, False, False, True),
}


class UnsupportedTokenizer(ValueError):
    pass


def build_tokenizer(meta: dict[str, Any]):
    """(tokenizers.Tokenizer, special-token names {bos, eos, eot, pad, unk: str|None}) from the metadata."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedTokenizer(
            f"tokenizer.ggml.model {kind!r} is not supported: only byte-level BPE ('gpt2', as Llama 3, Qwen "
            "and SmolLM use) is rebuilt from a GGUF")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedTokenizer(f"tokenizer.ggml.pre {pre!r} is not supported (supported: "
                                   f"{', '.join(sorted(PRE_TOKENIZERS))})")
    regex, digits, nfc, ignore_merges = PRE_TOKENIZERS[pre]
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types = _ints(meta.get("tokenizer.ggml.token_type")) or [1] * len(tokens)
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False,
                               ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    steps = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if regex is None:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps += [pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    added = [(tokens[i], types[i] == CONTROL) for i in range(len(tokens)) if types[i] in (CONTROL, USER_DEFINED)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, special in added if special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, special in added if not special])

    def name(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    specials = {k: name(k) for k in ("bos", "eos", "eot", "eom", "padding", "unknown")}
    bos = specials["bos"]
    if _bool(meta.get("tokenizer.ggml.add_bos_token")) and bos:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                          special_tokens=[(bos, vocab[bos])]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok, specials


def _ints(v) -> list[int]:
    if v is None:
        return []
    return [int(x) for x in (v.tolist() if hasattr(v, "tolist") else v)]


def _bool(v) -> bool:
    return bool(v.item() if hasattr(v, "item") else v)
