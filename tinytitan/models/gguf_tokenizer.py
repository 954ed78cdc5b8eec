"""A Hugging Face ``tokenizers`` tokenizer rebuilt from a GGUF's metadata.

A GGUF carries its vocabulary (``tokenizer.ggml.tokens``, ``token_type``) and, by ``tokenizer.ggml.model``:

- ``gpt2`` (byte-level BPE: Llama 3, Qwen, SmolLM, DeepSeek): its merges and the name of its pre-tokenizer
  (``tokenizer.ggml.pre``), which stands for a fixed sequence of split regexes in llama.cpp; only the names
  below are rebuilt, each as the original model's tokenizer.json states it;
- ``llama`` (SentencePiece BPE: Llama 2, Mistral, Gemma): per-token scores instead of merges. The merges are
  derived from the scores as Hugging Face's converter derives them from a SentencePiece model (every split
  of a piece into two pieces, ranked by the whole piece's score), with byte fallback (``<0xNN>`` tokens),
  ``▁`` for spaces and, unless ``tokenizer.ggml.add_space_prefix`` is false (Gemma), a space before the
  text and after each special token, as llama.cpp's tokenizer adds it.

Anything else is refused by name, since a near-miss tokenizer would make a model that answers, wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# token_type values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # SentencePiece's visible space

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# DeepSeek LLM, DeepSeek-V2 / V2-Lite (``deepseek-llm``): the Split regexes of deepseek-ai/deepseek-llm-7b-base's
# tokenizer.json, in its order (llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM lists the same five; its last step,
# ``\p{N}+``, is the tokenizer.json's Digits(individual_digits) here). The letter class is the file's own list
# of cased-letter ranges (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, fullwidth, Deseret, Osage …),
# written as escapes.
DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943")
DEEPSEEK_LLM_SPLITS = (
    "[\r\n]",
    r"\s?[" + DEEPSEEK_LLM_LETTERS + "]+",
    r"\s?[!-/:-~" + "\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",  # ASCII, fullwidth, quotes
    r"\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",  # CJK ideographs, U+0800..U+4E00, Hangul
)
# DeepSeek-V3 / R1 (``deepseek-v3``): the three Split regexes of deepseek-ai/DeepSeek-V3's tokenizer.json (the
# same as llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM): digits in groups of up to three, runs of CJK
# ideographs and kana, then a GPT-4-like rule on what is left.
DEEPSEEK_V3_SPLITS = (
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
)
DIGITS = "digits one by one"  # a step: tokenizers' Digits(individual_digits=True)


@dataclass(frozen=True)
class Pre:
    """A ``tokenizer.ggml.pre`` as its Hugging Face pre-tokenizer: ``steps`` (Split regexes, isolated, and
    ``DIGITS``) then ByteLevel without its own regex; with no steps, GPT-2's ByteLevel with its built-in regex
    (after the digits, for ``gpt2_digits``)."""
    steps: tuple[str, ...] = ()
    gpt2_digits: bool = False
    nfc: bool = False
    ignore_merges: bool = False


PRE_TOKENIZERS = {
    "default": Pre(),
    "gpt-2": Pre(),
    "gpt2": Pre(),
    "smollm": Pre(gpt2_digits=True),
    "qwen2": Pre((QWEN2_REGEX,), nfc=True),
    "llama-bpe": Pre((LLAMA3_REGEX,), ignore_merges=True),
    "llama3": Pre((LLAMA3_REGEX,), ignore_merges=True),
    "deepseek-llm": Pre((*DEEPSEEK_LLM_SPLITS, DIGITS)),
    "deepseek-v3": Pre(DEEPSEEK_V3_SPLITS),
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
    spec = PRE_TOKENIZERS[pre]
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False,
                               ignore_merges=spec.ignore_merges))
    if spec.nfc:
        tok.normalizer = normalizers.NFC()
    steps = [pre_tokenizers.Digits(individual_digits=True) if step == DIGITS
             else pre_tokenizers.Split(Regex(step), behavior="isolated", invert=False) for step in spec.steps]
    if spec.steps:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    else:
        if spec.gpt2_digits:
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
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
