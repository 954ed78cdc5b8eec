"""A tokenizer mlx-lm detokenizes with its naive streaming detokenizer (one it cannot read token by token: a
``*.tiktoken`` vocabulary, an unfamiliar ``tokenizer.json`` decoder) decodes only a window of the last tokens per
token, not the whole current line again: a long one-line answer (a tool call's JSON arguments) costs the same per
token as a short one, and its text is the tokenizer's."""

from __future__ import annotations

import json

import pytest
from mlx_lm.tokenizer_utils import NaiveStreamingDetokenizer

from naive_tokenizer import naive_tokenizer
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message, Tool
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.engine.decode.detokenizer import WindowedDetokenizer, row_detokenizer
from tinytitan.engine.decode.token_events import DecodeLoop

WRITE = Tool("write", parameters={"type": "object", "properties": {"content": {"type": "string"}}})


@pytest.fixture(scope="module")
def naive_tok(tmp_path_factory):
    tok = naive_tokenizer(tmp_path_factory.mktemp("naive-tok"))
    assert isinstance(tok.detokenizer, NaiveStreamingDetokenizer)
    return tok


def counting_decodes(monkeypatch, tok) -> list[int]:
    """The number of ids each ``decode`` of the tokenizer was given."""
    hf = tok.decode.__self__  # (the wrapper hands ``decode`` on to the Hugging Face tokenizer)
    real, sizes = hf.decode, []

    def decode(ids, *args, **kwargs):
        sizes.append(len(ids))
        return real(ids, *args, **kwargs)

    monkeypatch.setattr(hf, "decode", decode)
    return sizes


def generate(tok, raw: str, req: ChatRequest) -> list:
    b = ScriptedBackend([ScriptEntry(raw)], tok, model_id="naive")
    prepared = b.prepare(req)
    events: list = []
    b.decode(prepared, DecodeLoop(b.parser(prepared), req.stop, events.append), lambda: False)
    return events


def test_a_long_one_line_argument_decodes_a_window_per_token(naive_tok, monkeypatch):
    value = " ".join(f"word{i % 97} ünïcødé 🙂 x" for i in range(400))  # one line, multi-byte characters
    raw = '<tool_call>\n{"name": "write", "arguments": {"content": "' + value + '"}}\n</tool_call>'
    n = len(naive_tok.encode(raw, add_special_tokens=False))
    assert n > 3000
    sizes = counting_decodes(monkeypatch, naive_tok)
    events = generate(naive_tok, raw, ChatRequest("m", (Message("user", "Write."),), (WRITE,)))
    (done,) = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert json.loads(done.arguments) == {"content": value}
    # the naive detokenizer decodes every token of the line again at each token: about n²/2 ids in all
    assert sum(sizes) < 12 * n, (sum(sizes), n)


@pytest.mark.parametrize("text", ["Hello, world.\nA second line  with  spaces\n\n", "ünïcødé 🙂🙂 中文 text\n x",
                                  " leading space , then\ttabs\t and a last word ", "x  , y   . z \t, w"])
def test_the_windowed_pieces_are_the_tokenizers_text(naive_tok, text):
    ids = naive_tok.encode(text, add_special_tokens=False)
    naive, windowed = naive_tok.detokenizer, row_detokenizer(naive_tok)
    assert isinstance(windowed, WindowedDetokenizer)
    pieces = []
    for token in ids:
        naive.add_token(token)
        windowed.add_token(token)
        pieces.append(windowed.last_segment)
        assert "\ufffd" not in pieces[-1]  # a character is released whole
    naive.finalize()
    windowed.finalize()
    pieces.append(windowed.last_segment)
    assert "".join(pieces) == naive_tok.decode(ids) == naive.text


def test_a_known_tokenizer_keeps_mlx_lms_detokenizer():
    from tinytitan.engine.backends.scripted import demo_tokenizer

    assert not isinstance(row_detokenizer(demo_tokenizer()), WindowedDetokenizer)


class Tidying:
    """A tokenizer that tidies a space before punctuation away (WordPiece's ``clean_up_tokenization_spaces``)."""

    pieces = ["Hello", " ", ",", " world", "a", " ,", "b"]

    def encode(self, text, add_special_tokens=False):
        return [4, 5, 6] if text == "a ,b" else []

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids).replace(" ,", ",")


def test_a_space_the_tokenizer_may_tidy_away_waits_for_the_next_token():
    windowed, pieces = WindowedDetokenizer(Tidying()), []
    assert windowed.clean_spaces
    for token in (0, 1, 2, 3):
        windowed.add_token(token)
        pieces.append(windowed.last_segment)
    windowed.finalize()
    pieces.append(windowed.last_segment)
    assert pieces == ["Hello", "", ",", " world", ""]


class SentencePieceLike:
    """A tokenizer that drops the word-boundary space of the first token it decodes (SentencePiece's ``▁``)."""

    pieces = ["▁The", "▁cat", "▁sat", ",", "▁on"]

    def decode(self, ids):
        text = "".join(self.pieces[i] for i in ids).replace("▁", " ")
        return text[1:] if text.startswith(" ") else text


def test_a_raw_rows_text_continues_its_prompt_with_the_space_the_first_token_begins_with():
    """A plain completion or fill-in-the-middle continues the prompt's text: the first token's space is part of
    it (a chat answer's detokenizer drops it, as mlx-lm's do), and a space is released as written."""
    raw, pieces = row_detokenizer(SentencePieceLike(), raw_prompt=[0, 1]), []
    assert isinstance(raw, WindowedDetokenizer) and not raw.clean_spaces
    for token in (2, 3, 4):
        raw.add_token(token)
        pieces.append(raw.last_segment)
    raw.finalize()
    pieces.append(raw.last_segment)
    assert pieces == [" sat", ",", " on", ""]
    chat = WindowedDetokenizer(SentencePieceLike(), holds_spaces=False)
    chat.add_token(2)
    assert chat.last_segment == "sat"  # (the same token, read as an answer's first)


@pytest.mark.parametrize("text", [" leading space , then\ttabs", "ünïcødé 🙂🙂 中文 text\n x"])
def test_a_raw_rows_pieces_are_the_text_after_the_prompts_own(naive_tok, text):
    prompt = naive_tok.encode("Once upon a time", add_special_tokens=False)
    ids = naive_tok.encode(text, add_special_tokens=False)
    raw, pieces = row_detokenizer(naive_tok, raw_prompt=prompt), []
    for token in ids:
        raw.add_token(token)
        pieces.append(raw.last_segment)
        assert "\ufffd" not in pieces[-1]
    raw.finalize()
    pieces.append(raw.last_segment)
    tail = prompt[-4:]
    assert "".join(pieces) == naive_tok.decode(tail + ids)[len(naive_tok.decode(tail)):]
