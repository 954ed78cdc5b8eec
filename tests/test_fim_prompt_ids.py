"""Fill-in-the-middle prompts built token by token, as Meta's ``infilling_prompt_tokens`` (CodeLlama) and llama.cpp's
infill build them: each marker its id, the prefix and the suffix each encoded alone; CodeLlama's suffix without the
leading ``▁`` a SentencePiece tokenizer gives a text. Checked with tokenizers shaped like CodeLlama's (a byte-fallback
BPE with the ``▁<PRE>``… markers), in both styles its tokenizer.json is found in: the legacy ``Prepend("▁")``
normalizer and the newer ``Metaspace(prepend_scheme="first")``."""

from __future__ import annotations

import ollama
import openai
import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper
from openai.types import Completion
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from fim_helpers import MODEL, KeepingIds
from tinytitan.chat_request import ChatRequest
from tinytitan.engine.backends.scripted import ScriptEntry, demo_tokenizer

PREFIX, SUFFIX = "def add(a, b):\n", "    return a + b\n\nprint(add(1, 2))\n"


def sentencepiece_like(markers: tuple[str, ...], legacy: bool) -> PreTrainedTokenizerFast:
    """A Llama-style tokenizer: byte fallback, ``▁`` for a space, a BOS before any text it encodes whole."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for ch in "▁abcdefghijklmnopqrstuvwxyz():+,=":
        vocab.setdefault(ch, len(vocab))
    merges = [("▁", "▁")]
    vocab["▁▁"] = len(vocab)
    for word in ("▁def", "▁return", "▁add", "print"):
        for k in range(2, len(word) + 1):
            merges.append((word[:k - 1], word[k - 1]))
            vocab.setdefault(word[:k], len(vocab))
    t = Tokenizer(BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if legacy:  # CodeLlama's own tokenizer.json
        t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:  # as transformers writes a Llama tokenizer since legacy=False
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tok.add_special_tokens({"additional_special_tokens": list(markers)})
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return tok


def pieces(tok, text: str) -> list[int]:
    """SentencePiece's own reading of ``text`` (spaces as ``▁``, no leading ``▁`` added): the BPE model alone."""
    return [t.id for t in tok.backend_tokenizer.model.tokenize(text.replace(" ", "▁"))]


@pytest.mark.parametrize("legacy", [True, False], ids=["prepend-normalizer", "metaspace-first"])
async def test_codellama_reads_its_prefix_with_a_space_and_its_suffix_without(serve, legacy):
    """Meta's layout ``<PRE> {pre} <SUF>{suf} <MID>``: the prefix encoded alone (its leading ``▁``), the suffix by
    ``encode_infilling`` (none). Encoded as one string, the legacy tokenizer gave the suffix a fifth leading
    space, and the newer one spelled ``def`` letter by letter, its ``▁`` lost."""
    markers = ("▁<PRE>", "▁<SUF>", "▁<MID>")
    tok = sentencepiece_like(markers + ("▁<EOT>",), legacy)
    backend = KeepingIds([ScriptEntry("x")], TokenizerWrapper(tok), model_id=MODEL)
    s = await serve(backend=backend)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
    r = await c.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=5)
    Completion.model_validate(r.model_dump())
    pre, suf, mid = (tok.convert_tokens_to_ids(m) for m in markers)
    expected = [1, pre] + pieces(tok, "▁" + PREFIX) + [suf] + pieces(tok, SUFFIX) + [mid]
    assert backend.ids == [expected] and r.usage.prompt_tokens == len(expected)
    assert tok.convert_ids_to_tokens(expected[2:4]) == ["▁def", "▁add"]
    assert tok.convert_ids_to_tokens(expected[-len(pieces(tok, SUFFIX)) - 1:][:3]) == ["▁▁", "▁▁", "r"]  # 4 spaces
    assert backend.prompts == [f"▁<PRE>{PREFIX}▁<SUF>{SUFFIX}▁<MID>"]


async def test_codestral_reads_each_gap_as_a_text_of_its_own(serve):
    """mistral_common's ``encode_fim`` encodes the suffix and the prefix each alone (each a text of its own, with
    its leading ``▁``), then ``[SUFFIX]{suf}[PREFIX]{pre}``; encoded as one string by a ``Metaspace("first")``
    tokenizer, the prefix lost its ``▁`` (``def`` spelled letter by letter)."""
    tok = sentencepiece_like(("[PREFIX]", "[SUFFIX]", "[MIDDLE]"), legacy=False)
    backend = KeepingIds([ScriptEntry("x")], TokenizerWrapper(tok), model_id=MODEL)
    s = await serve(backend=backend)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
    await c.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=5)
    pre, suf = tok.convert_tokens_to_ids("[PREFIX]"), tok.convert_tokens_to_ids("[SUFFIX]")
    alone = [tok.encode(t, add_special_tokens=False) for t in (SUFFIX, PREFIX)]
    assert backend.ids == [[1, suf] + alone[0] + [pre] + alone[1]]
    assert tok.convert_ids_to_tokens(alone[1][:2]) == ["▁def", "▁add"]


# a source file that speaks of special tokens (this project's tests do): its gaps hold their spellings as text
CODE_PREFIX = 'END = "<|endoftext|>"  # the end\nMID = "<|fim_middle|>"\n'
CODE_SUFFIX = 'TURN = "<|im_end|>"\nPRE = "<|fim_prefix|>"\n'


QWEN_FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")


def qwen_coder_like():
    tok = demo_tokenizer()  # a fresh copy: the shared one stays without FIM tokens
    tok.add_special_tokens({"additional_special_tokens": list(QWEN_FIM)})
    return tok


@pytest.mark.parametrize("client", ["openai", "ollama"])
async def test_special_token_spellings_in_the_gaps_are_read_as_text(serve, client):
    """llama.cpp's infill tokenizes the prefix and the suffix with ``parse_special`` false: the client's code is
    text. Read with its special tokens, the gap held a real ``<|endoftext|>`` and a second ``<|fim_middle|>``:
    the model saw a false end of the document and a false start of the middle."""
    tok = qwen_coder_like()
    markers = QWEN_FIM
    backend = KeepingIds([ScriptEntry("x")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    if client == "openai":
        c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
        r = await c.completions.create(model=MODEL, prompt=CODE_PREFIX, suffix=CODE_SUFFIX, max_tokens=5)
        Completion.model_validate(r.model_dump())
        counted = r.usage.prompt_tokens
    else:
        r = await ollama.AsyncClient(host=s.base).generate(model=MODEL, prompt=CODE_PREFIX, suffix=CODE_SUFFIX)
        counted = r.prompt_eval_count
    pre, suf, mid = (tok.convert_tokens_to_ids(m) for m in markers)
    plain = [tok.encode(t, add_special_tokens=False, split_special_tokens=True) for t in (CODE_PREFIX, CODE_SUFFIX)]
    assert backend.ids == [[pre] + plain[0] + [suf] + plain[1] + [mid]] and counted == len(backend.ids[0])
    specials = set(tok.all_special_ids)
    assert not specials & set(plain[0] + plain[1])
    assert tok.decode(plain[0]) == CODE_PREFIX and tok.decode(plain[1]) == CODE_SUFFIX


async def test_a_raw_prompt_without_a_suffix_keeps_its_special_tokens(serve):
    """A raw completion prompt is read with its special tokens, as llama.cpp's and vLLM's completions read one: it
    is often written in the model's own template on purpose."""
    tok = demo_tokenizer()
    backend = KeepingIds([ScriptEntry("x")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    await c.completions.create(model=MODEL, prompt=prompt, max_tokens=5)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    assert backend.ids == [tok.encode(prompt, add_special_tokens=False)] and backend.ids[0].count(start) == 2


def test_the_gaps_leave_the_shared_tokenizer_reading_special_tokens():
    """transformers' ``split_special_tokens=True`` turns ``encode_special_tokens`` on in the Rust tokenizer every
    request shares, and leaves it on: a chat prompt encoded on another worker thread then read its template's
    ``<|im_start|>`` as text. The gaps are read by a copy kept for that alone."""
    tok = qwen_coder_like()
    backend = KeepingIds([ScriptEntry("x")], tok, model_id=MODEL)
    _, ids = backend.raw_prompt(ChatRequest(MODEL, (), prompt=CODE_PREFIX, suffix=CODE_SUFFIX))
    assert tok.convert_tokens_to_ids("<|endoftext|>") not in ids
    assert not tok.backend_tokenizer.encode_special_tokens
    assert tok.backend_tokenizer.encode("<|im_start|>user", add_special_tokens=False).ids[0] == \
        tok.convert_tokens_to_ids("<|im_start|>")


def test_markers_a_vocabulary_leaves_unflagged_are_read_as_text_in_the_gaps():
    """Qwen2.5-coder's, Qwen3-coder's and CodeGemma's tokenizers list their FIM, pad and file tokens as added tokens
    with ``"special": false``: a tokenizer told to read special tokens as text still matched them, so a source file
    spelling ``"<|fim_middle|>"`` or ``"<|file_sep|>"`` put a second middle marker or a next file into the gap.
    llama.cpp's converter makes every ``<|…|>`` token a control token (``does_token_look_special``) and its loader
    every FIM marker, pad and separator: its infill reads them all as text. An added token spelled otherwise (Qwen's
    ``<tool_call>``) stays a user-defined token there and here, matched in the gap as in any text."""
    tok = demo_tokenizer()
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in QWEN_FIM + ("<|file_sep|>", "<fim-pad>", "<tool_call>")])
    backend = KeepingIds([ScriptEntry("x")], tok, model_id=MODEL)
    prefix = 'MID = "<|fim_middle|>"\nSEP = "<|file_sep|>"\n'
    suffix = 'PAD = "<fim-pad>"\nCALL = "<tool_call>"\n'
    _, ids = backend.raw_prompt(ChatRequest(MODEL, (), prompt=prefix, suffix=suffix))
    pre, suf, mid, sep, pad, call = (tok.convert_tokens_to_ids(t) for t in QWEN_FIM + (
        "<|file_sep|>", "<fim-pad>", "<tool_call>"))
    assert ids[0] == pre and ids[-1] == mid and ids.count(suf) == 1 and ids.count(pre) == 1
    assert mid not in ids[:-1] and sep not in ids and pad not in ids
    assert ids.count(call) == 1  # not control-looking: matched, as llama.cpp matches a user-defined token
    assert tok.decode(ids[1:ids.index(suf)]) == prefix and tok.decode(ids[ids.index(suf) + 1:-1]) == suffix
    # the shared tokenizer still reads them as tokens, and keeps them unflagged
    assert tok.backend_tokenizer.encode("<|file_sep|>", add_special_tokens=False).ids == [sep]
    assert not any(t.special for t in tok.backend_tokenizer.get_added_tokens_decoder().values()
                   if t.content in QWEN_FIM)
