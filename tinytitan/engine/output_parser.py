"""The output parser: raw model text, token by token, into channel events.

The parsers live with the model families (``families/``): ``families.scanner.OutputParser`` for
marker-delimited markup (Qwen, Qwen3-coder, Llama 3.x, Mistral, GLM, Gemma), ``families.harmony.HarmonyParser``
for gpt-oss. This module keeps the names the rest of the engine imports.
"""

from __future__ import annotations

from .families.harmony import HarmonyParser
from .families.markup import PLAIN, QWEN, REASONING, TEXT, TOOL, Markup, new_call_id
from .families.scanner import OutputParser

__all__ = ["OutputParser", "HarmonyParser", "Markup", "QWEN", "PLAIN", "REASONING", "TEXT", "TOOL", "new_call_id"]
