"""Raw prompts (``ChatRequest.prompt``: plain completions, fill-in-the-middle): the model's text taken verbatim.

Rules:
- A raw completion's output is text exactly as generated: no reasoning or tool-call channels, no whitespace
  trimmed (``VerbatimParser``), and its first token keeps its leading space (``IncrementalText``: mlx-lm's
  streaming detokenizers drop it, right for a chat answer, wrong for text that continues a prompt). An answer
  that continues a prefill (``ChatRequest.continue_final``) takes its text the same way, and its own parser.
"""

from __future__ import annotations

from ...events import TextDelta, TokenEvent
from ..decode.output_parser import TEXT


class IncrementalText:
    """Generated token ids → text pieces, exactly as the tokenizer decodes them, with the prompt's last
    tokens as context (so a first token's leading space, or an SPM word boundary, comes out right). Each
    step decodes only the tokens since the last piece: linear in the answer's length."""

    CONTEXT = 4

    def __init__(self, tokenizer, prompt: list[int]):
        self.tokenizer = tokenizer
        self.ids = list(prompt[-self.CONTEXT:])
        self.prefix = 0
        self.read = len(self.ids)

    def add(self, token: int) -> str:
        self.ids.append(token)
        return self._piece(final=False)

    def flush(self) -> str:
        return self._piece(final=True)

    def _piece(self, final: bool) -> str:
        before = self.tokenizer.decode(self.ids[self.prefix:self.read])
        now = self.tokenizer.decode(self.ids[self.prefix:])
        if len(now) > len(before) and (final or not now.endswith("\ufffd")):  # a multi-byte character waits
            self.prefix, self.read = self.read, len(self.ids)
            return now[len(before):]
        return ""


class VerbatimParser:
    """The output parser of a raw completion: every piece is text, as written."""

    tool_calls = 0

    def feed(self, piece: str) -> tuple[list[TokenEvent], str]:
        return ([TextDelta(piece)] if piece else []), TEXT

    def finish(self, cut: bool = False) -> list[TokenEvent]:
        return []
