"""Which tokens' log probabilities ride on the answer's text deltas (decode/token_events.py): exactly the tokens
whose text goes out as content, in order. The layout a parser drops before a text run (the blank line after a
thought, after a call) and a channel header's markup (gpt-oss's ``final<|message|>``) are not content: a client
that reads the first listed token's probability (a label's confidence) must read the answer's first token."""

from __future__ import annotations

import pytest

from tinytitan.engine.decode.token_events import DecodeLoop
from tinytitan.engine.families import FAMILIES
from tinytitan.events import TextDelta, TokenLogprob


def listed(family: str, pieces: list[str], stops: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The content sent and the tokens listed with it, for ``pieces`` fed one token each."""
    events = []
    loop = DecodeLoop(FAMILIES[family].parser(False), stops, events.append)
    loop.start(1)
    for piece in pieces:
        if not loop.token(piece, TokenLogprob(piece, tuple(piece.encode()), -0.5)):
            break
    loop.end(False)
    deltas = [ev for ev in events if isinstance(ev, TextDelta)]
    return "".join(d.text for d in deltas), [lp.token for d in deltas for lp in d.logprobs]


@pytest.mark.parametrize("family, pieces, content, tokens", [
    # Qwen3: the blank line after </think> is dropped, not the answer's first token
    ("qwen", ["<think>", "\n", "hmm", "\n", "</think>", "\n\n", "Yes", "."], "Yes.", ["Yes", "."]),
    # gpt-oss: the final channel's header is markup
    ("gpt_oss", ["<|channel|>", "analysis", "<|message|>", "Hmm", "<|end|>", "<|start|>", "assistant",
                 "<|channel|>", "final", "<|message|>", "Hi", "!", "<|return|>"], "Hi!", ["Hi", "!"]),
    # text held back (a possible marker, trailing layout) goes out with the token that releases it
    ("qwen", ["A", " <", "b", "\n\n", "C"], "A <b\n\nC", ["A", " <", "b", "\n\n", "C"]),
])
def test_only_the_sent_text_tokens_are_listed(family, pieces, content, tokens):
    assert listed(family, pieces) == (content, tokens)


def test_a_character_spelled_over_two_tokens_is_listed_whole():
    # (a detokenizer releases nothing for a token that ends inside a character: its text is "")
    sent, tokens = listed("qwen", ["Caf", "", "\u00e9", "!"])
    assert sent == "Caf\u00e9!" and tokens == ["Caf", "", "\u00e9", "!"]



@pytest.mark.parametrize("pieces, content, tokens", [
    (["Hi", " there", "END", "more"], "Hi there", ["Hi", " there"]),  # the stop string a token of its own
    (["Hi", " the", "reE", "ND"], "Hi there", ["Hi", " the", "reE"]),  # begun inside a token that also sends text
])
def test_a_stop_strings_tokens_are_not_listed(pieces, content, tokens):
    # its text never goes out, so its tokens are not the answer's: content's list ends where the content does
    assert listed("qwen", pieces, ("END",)) == (content, tokens)


@pytest.mark.parametrize("family, pieces, content, tokens", [
    # a "<" held as a possible marker, then released while a second one is held: each token listed once
    ("qwen", ["x", "<", "<", "y"], "x<<y", ["x", "<", "<", "y"]),
    ("qwen", ["a", " <", " <", " b"], "a < < b", ["a", " <", " <", " b"]),
    ("gpt_oss", ["<|channel|>", "final", "<|message|>", "1", "<", "<", "4", "<|return|>"], "1<<4",
     ["1", "<", "<", "4"]),
])
def test_a_repeated_held_piece_is_listed_for_each_token(family, pieces, content, tokens):
    assert listed(family, pieces) == (content, tokens)
