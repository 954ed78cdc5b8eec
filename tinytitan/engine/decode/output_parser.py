"""The output parser: raw model text, token by token, into channel events.

The parsers live with the model families (``families/``): ``families.scanner.OutputParser`` for
marker-delimited markup (Qwen, Qwen3-coder, Llama 3.x, Mistral, GLM, Gemma), ``families.harmony.HarmonyParser``
for gpt-oss. This module keeps the names the rest of the engine imports.
"""

from __future__ import annotations

from ..families.harmony_parser import HarmonyParser
from ..families.markup import PLAIN, QWEN, REASONING, TEXT, TOOL, Markup, new_call_id
from ..families.scanner import OutputParser

__all__ = ["OutputParser", "HarmonyParser", "Markup", "QWEN", "PLAIN", "REASONING", "TEXT", "TOOL", "new_call_id",
           "WrappedParser"]


class WrappedParser:
    """An output parser around another (a turn's call limit, a forced call cut short): what ``_keep`` lets
    through of the wrapped parser's events; its other attributes are the wrapped parser's."""

    def __init__(self, parser):
        self.parser = parser

    def __getattr__(self, name):  # the wrapped parser's other attributes (namespaces …)
        return getattr(self.parser, name)

    def feed(self, piece: str) -> tuple[list, str]:
        events, channel = self.parser.feed(piece)
        return self._keep(events), channel

    def _keep(self, events: list) -> list:
        raise NotImplementedError
