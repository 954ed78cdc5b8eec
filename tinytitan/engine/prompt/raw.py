"""Raw prompts (``ChatRequest.prompt``: plain completions, fill-in-the-middle): the model's text taken verbatim.

Rules:
- A raw completion's output is text exactly as generated: no reasoning or tool-call channels, no whitespace
  trimmed (``VerbatimParser``), and its first token keeps its leading space (its row's detokenizer is seeded
  with the prompt's last tokens: decode/detokenizer.py). An answer
  that continues a prefill (``ChatRequest.continue_final``) takes its text the same way, and its own parser.
"""

from __future__ import annotations

from ...events import TextDelta, TokenEvent
from ..decode.output_parser import TEXT


class VerbatimParser:
    """The output parser of a raw completion: every piece is text, as written."""

    tool_calls = 0

    def feed(self, piece: str) -> tuple[list[TokenEvent], str]:
        return ([TextDelta(piece)] if piece else []), TEXT

    def finish(self, cut: bool = False) -> list[TokenEvent]:
        return []
