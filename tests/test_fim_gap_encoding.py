"""The gaps of a fill-in-the-middle prompt read as text without copying the tokenizer where they need not: the
shared tokenizer's own encoding, unless it matched a token the gaps read as text; only then the copy that reads
special tokens as text (``fill_in._text_copy``, a second at a 128k vocabulary) is made, once per tokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken

from fim_helpers import codellama_tokenizer
from tinytitan.engine.backends.scripted import demo_tokenizer
from tinytitan.engine.prompt import fill_in

QWEN_FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
UNFLAGGED = ("<|file_sep|>", "<fim-pad>", "<tool_call>")  # as Qwen-coder lists them: added, "special": false


def coder_tokenizer():
    tok = demo_tokenizer()  # a fresh copy
    tok.add_special_tokens({"additional_special_tokens": list(QWEN_FIM)})
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in UNFLAGGED])
    return tok


def counting_copies(monkeypatch) -> list:
    made: list = []
    real = fill_in._text_copy

    def text_copy(backend):
        made.append(backend)
        return real(backend)

    monkeypatch.setattr(fill_in, "_text_copy", text_copy)
    return made


def test_code_that_spells_no_special_token_is_encoded_without_a_copy(monkeypatch):
    """An editor's code rarely spells a special token: its gaps are the shared tokenizer's own ids, and the copy
    (which cost an editor's first completion on a Qwen-coder model a second) is never made."""
    tok = coder_tokenizer()
    made = counting_copies(monkeypatch)
    encode = fill_in.as_text(tok)
    code = 'def add(a, b):\n    """Add. <tool_call> stays a token: not control-looking."""\n    return a + b\n'
    assert encode(code) == tok.encode(code, add_special_tokens=False) and made == []
    assert tok.convert_tokens_to_ids("<tool_call>") in encode(code)


def test_a_special_spelling_makes_the_copy_once(monkeypatch):
    tok = coder_tokenizer()
    made = counting_copies(monkeypatch)
    encode = fill_in.as_text(tok)
    for text in ('END = "<|endoftext|>"\n', 'MID = "<|fim_middle|>"\n', 'SEP = "<|file_sep|>"\n'):
        ids = encode(text)
        assert tok.decode(ids) == text and not set(ids) & {tok.convert_tokens_to_ids(t) for t in
                                                            QWEN_FIM + ("<|endoftext|>", "<|file_sep|>")}
    assert len(made) == 1


FRAGMENTS = ("def f(x):\n", "    return x\n", " ", "\n", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_middle|>",
             "<|file_sep|>", "<fim-pad>", "<tool_call>", "<|endof", "text|>", "<|", "|>", "<", "fim", "é", "  ")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12))
def test_the_shared_encoding_is_taken_only_where_it_is_the_copys(parts):
    """Whatever the text, the gaps' ids are those of the copy that reads special tokens as text: the shared
    tokenizer's are taken only where they are the same."""
    tok = TOKENIZER
    text = "".join(parts)
    assert fill_in.as_text(tok)(text) == list(COPY.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("text", ["x = 1  # <FILL_ME>", 'a = "<FILL_ME>" + b', "x <FILL_ME> y <FILL_ME> z"])
def test_codellamas_fill_token_in_a_gap_is_its_characters(text):
    """CodeLlamaTokenizer's ``encode`` reads a text holding ``<FILL_ME>`` as an infill prompt: taken for the shared
    encoding, a gap ending in it lost those characters, one holding two failed (a 500), and one holding it between
    texts left the tokenizer every request shares with another normalizer. The gaps are its Rust tokenizer's."""
    tok = codellama_tokenizer()
    backend = tok.backend_tokenizer
    before = backend.to_str()
    ids = fill_in.as_text(tok)(text)
    assert ids == fill_in._text_copy(backend).encode(text, add_special_tokens=False).ids
    assert backend.decode(ids) == text and backend.to_str() == before


@pytest.mark.parametrize("left_on", ["truncation", "padding"])
def test_a_cut_or_padded_shared_encoding_is_not_taken(left_on):
    """Truncation or padding another caller left on the shared tokenizer cuts or pads its encoding: the gap is then
    the copy's (which has neither), never the cut or padded ids."""
    tok = coder_tokenizer()
    backend = tok.backend_tokenizer
    if left_on == "truncation":
        backend.enable_truncation(3)
    else:
        backend.enable_padding(length=64, pad_id=tok.convert_tokens_to_ids("a"), pad_token="a")
    code = "def f(x):\n    return x\n"
    assert fill_in.as_text(tok)(code) == list(COPY.encode(code, add_special_tokens=False).ids)


TOKENIZER = coder_tokenizer()
COPY = fill_in._text_copy(TOKENIZER.backend_tokenizer)
