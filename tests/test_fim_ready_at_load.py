"""A coder model's load makes what its first fill-in-the-middle request would otherwise wait for: the copy of the
tokenizer the gaps are read with (``as_text``: 0.5-0.7 s for DeepSeek-Coder's 128k vocabulary) and the layout,
found in the vocabulary its backend reads at construction anyway (a second read: tens of milliseconds). A model
without fill-in-the-middle markers makes no copy: its load costs what it did."""

from __future__ import annotations

from tinytitan.chat_request import ChatRequest
from tinytitan.engine.prompt import fill_in

from test_fim_end_token import served_with

STARCODER = ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"]


def copies_made(monkeypatch) -> list:
    """The tokenizers ``as_text`` is asked to copy from now on."""
    made, real = [], fill_in.as_text
    monkeypatch.setattr(fill_in, "as_text", lambda tokenizer: made.append(tokenizer) or real(tokenizer))
    return made


def test_the_load_of_a_coder_model_makes_the_copy_its_first_infill_reads(tmp_path, monkeypatch):
    made = copies_made(monkeypatch)
    backend = served_with(tmp_path, STARCODER)
    assert not made  # the tokenizer alone (a catalog's model listed, not loaded) makes none
    reads, vocab = [], backend.tokenizer.get_vocab()
    monkeypatch.setattr(backend.tokenizer, "get_vocab", lambda: reads.append(1) or vocab)
    backend.ensure_loaded()
    assert made == [backend.tokenizer]
    _, ids = backend.raw_prompt(ChatRequest("m", (), prompt="def add(a, b):\n", suffix="\nprint(add(1, 2))\n"))
    assert ids[0] == vocab["<fim_prefix>"] and ids[-1] == vocab["<fim_middle>"]
    assert made == [backend.tokenizer] and not reads  # the request made no copy and read no vocabulary


def test_a_model_without_markers_makes_no_copy_at_load(tmp_path, monkeypatch):
    made = copies_made(monkeypatch)
    backend = served_with(tmp_path, [])
    backend.ensure_loaded()
    assert backend.fim_layout is None and not made
