"""A Hugging Face ``tokenizers`` tokenizer rebuilt from a GGUF's metadata.

A GGUF carries its vocabulary (``tokenizer.ggml.tokens``, ``token_type``) and, by ``tokenizer.ggml.model``:

- ``gpt2`` (byte-level BPE: Llama 3, Qwen, SmolLM): its merges and the name of its pre-tokenizer
  (``tokenizer.ggml.pre``), which stands for a fixed split regex in llama.cpp; only the names below are
  rebuilt;
- ``llama`` (SentencePiece BPE: Llama 2, Mistral, Gemma): per-token scores instead of merges. The merges are
  derived from the scores as Hugging Face's converter derives them from a SentencePiece model (every split
  of a piece into two pieces, ranked by the whole piece's score), with byte fallback (``<0xNN>`` tokens),
  ``▁`` for spaces and, unless ``tokenizer.ggml.add_space_prefix`` is false (Gemma), a space before the
  text and after each special token, as llama.cpp's tokenizer adds it.

Anything else is refused by name, since a near-miss tokenizer would make a model that answers, wrongly.
"""

from __future__ import annotations

from typing import Any

# token_type values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # SentencePiece's visible space

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
    """(tokenizers.Tokenizer, special-token names {bos, eos, eot, eom, padding, unknown: str|None}) from the
    metadata."""
    kind = meta.get("tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
        raise UnsupportedTokenizer(
            f"tokenizer.ggml.model {kind!r} is not supported: byte-level BPE ('gpt2', as Llama 3, Qwen and "
            "SmolLM use) and SentencePiece ('llama', as Llama 2, Mistral and Gemma use) are rebuilt from a GGUF")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types = _ints(meta.get("tokenizer.ggml.token_type")) or [NORMAL] * len(tokens)
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    tok = _byte_level(meta, vocab) if kind == "gpt2" else _sentencepiece(meta, tokens, types, vocab)
    return _finish(tok, meta, tokens, types, vocab, byte_level=kind == "gpt2")


def _byte_level(meta: dict, vocab: dict[str, int]):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedTokenizer(f"tokenizer.ggml.pre {pre!r} is not supported (supported: "
                                   f"{', '.join(sorted(PRE_TOKENIZERS))})")
    regex, digits, nfc, ignore_merges = PRE_TOKENIZERS[pre]
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
    return tok


def spm_merges(tokens: list[str], types: list[int], scores: list[float], vocab: dict[str, int]) -> list:
    """The BPE merges a SentencePiece vocabulary implies: each normal piece split in two pieces of the
    vocabulary, ranked by the piece's score (ties: in vocabulary order), as Hugging Face's converter ranks
    them."""
    ranked = []
    for i, piece in enumerate(tokens):
        if types[i] != NORMAL or len(piece) < 2:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        ranked.extend((scores[i], len(ranked), pair) for pair in local)
    ranked.sort(key=lambda r: (-r[0], r[1]))
    return [pair for _, _, pair in ranked]


def _sentencepiece(meta: dict, tokens: list[str], types: list[int], vocab: dict[str, int]):
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores = [float(x) for x in (meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens))]
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[int(unk_id)] if unk_id is not None else next(
        (t for t, k in zip(tokens, types) if k == UNKNOWN), None)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=spm_merges(tokens, types, scores, vocab), unk_token=unk,
                               fuse_unk=True, byte_fallback=True))
    prefix = _bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    replace = normalizers.Replace(" ", SPACE)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if prefix else replace
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(steps)
    return tok


def _finish(tok, meta: dict, tokens: list[str], types: list[int], vocab: dict[str, int], byte_level: bool):
    """Special and user-defined tokens, the special-token names, and BOS where the file says to add it."""
    from tokenizers import AddedToken, processors

    added = [(tokens[i], types[i] == CONTROL) for i in range(len(tokens)) if types[i] in (CONTROL, USER_DEFINED)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, special in added if special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, special in added if not special])

    def name(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    specials = {k: name(k) for k in ("bos", "eos", "eot", "eom", "padding", "unknown")}
    bos = specials["bos"]
    steps = [processors.ByteLevel(trim_offsets=False)] if byte_level else []
    if _bool(meta.get("tokenizer.ggml.add_bos_token")) and bos:
        steps.append(processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                   special_tokens=[(bos, vocab[bos])]))
    if steps:
        tok.post_processor = steps[0] if len(steps) == 1 else processors.Sequence(steps)
    return tok, specials


def _ints(v) -> list[int]:
    if v is None:
        return []
    return [int(x) for x in (v.tolist() if hasattr(v, "tolist") else v)]


def _bool(v) -> bool:
    return bool(v.item() if hasattr(v, "item") else v)
