"""A row's streaming detokenizer: generated token ids into the text pieces its parser reads.

Rules:
- mlx-lm's own streaming detokenizer is used where it is a byte-level or SentencePiece one: those add each token's
  text to what came before, the same work for every token.
- Where mlx-lm falls back to its naive one (a tokenizer it cannot read token by token: a ``*.tiktoken``
  vocabulary, a ``tokenizer.json`` decoder other than the two it knows), that one decodes every token of the
  current line again at each token: quadratic in a line's length, and a tool call's JSON arguments, a minified
  file or a long paragraph are one line (30k tokens on one line cost seconds of decoding per answer, more than
  the model). ``WindowedDetokenizer`` takes its place: it decodes only the tokens since the piece before the
  last one it released (the window that keeps a word boundary right), so each token costs the same.
- Its pieces are the naive one's: text is released once it does not end in a character begun and not finished
  (U+FFFD), nor, for a tokenizer that tidies spaces before punctuation (``" ,"`` → ``","``), in a space the next
  token may take away; ``finalize`` releases what is held, as decoded.
- A raw prompt's row (plain completions, fill-in-the-middle, a continued prefill: prompt/raw.py) reads its text
  through the same window, seeded with the prompt's last tokens: its first token keeps its leading space (mlx-lm's
  streaming detokenizers drop it, right for a chat answer, wrong for text that continues a prompt), and a space
  is released as written (the text is the tokenizer's own, not tidied for a reader).
"""

from __future__ import annotations

from mlx_lm.tokenizer_utils import NaiveStreamingDetokenizer


RAW_CONTEXT = 4  # a raw row's window starts with the prompt's last tokens


def row_detokenizer(tokenizer, raw_prompt: list[int] | None = None):
    """A fresh streaming detokenizer for one row: mlx-lm's, or the windowed one where mlx-lm's is its naive one
    or where the row continues ``raw_prompt`` verbatim."""
    if raw_prompt is not None:
        return WindowedDetokenizer(tokenizer, context=raw_prompt[-RAW_CONTEXT:], holds_spaces=False)
    detok = tokenizer.detokenizer
    if isinstance(detok, NaiveStreamingDetokenizer):
        return WindowedDetokenizer(tokenizer)
    detok.reset()
    return detok


class WindowedDetokenizer:
    """mlx-lm's streaming-detokenizer interface (``add_token``, ``finalize``, ``last_segment``), decoding a window
    of the last tokens only."""

    def __init__(self, tokenizer, context: list[int] = (), holds_spaces: bool | None = None):
        """``context``: tokens before the first one added, decoded with it but never released;
        ``holds_spaces``: hold a trailing space back (None: where the tokenizer tidies spaces away)."""
        self.tokenizer = tokenizer
        self.context = list(context)
        if holds_spaces is None:  # (as mlx-lm's naive detokenizer finds out)
            holds_spaces = " ," not in tokenizer.decode(tokenizer.encode("a ,b", add_special_tokens=False))
        self.clean_spaces = holds_spaces
        self.reset()

    def reset(self) -> None:
        self.tokens: list[int] = list(self.context)
        self.prefix = 0  # the window starts here: the tokens of the piece before the last one released
        self.read = len(self.tokens)  # the tokens whose text is released (or never is: the context)
        self.pieces: list[str] = []  # released, not yet read through ``last_segment``

    def add_token(self, token: int) -> None:
        self.tokens.append(token)
        self._release(final=False)

    def finalize(self) -> None:
        self._release(final=True)

    @property
    def last_segment(self) -> str:
        """The text released since this was last read."""
        out = "".join(self.pieces)
        self.pieces.clear()
        return out

    def _release(self, final: bool) -> None:
        if self.read == len(self.tokens):
            return
        before = self.tokenizer.decode(self.tokens[self.prefix:self.read])
        now = self.tokenizer.decode(self.tokens[self.prefix:])
        if not final and (now.endswith("\ufffd") or (self.clean_spaces and now.endswith(" "))):
            return  # a character begun (its next bytes come), or a space the next token may take away
        if len(now) > len(before):
            self.pieces.append(now[len(before):])
            self.prefix, self.read = self.read, len(self.tokens)
