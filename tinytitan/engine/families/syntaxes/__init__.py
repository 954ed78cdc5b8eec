"""The tool-call syntaxes, one module each (``base.py`` says what a syntax owns), and their registry.

A new syntax is a module here and one line below; a family that writes it is a row in ``families/__init__.py``.
"""

from __future__ import annotations

from . import deepseek, deepseek_r1, dsml, gemma, harmony, json_calls, kimi, minimax, mistral, pythonic, tags
from .base import Syntax

SYNTAXES: dict[str, Syntax] = {s.name: s for s in (
    json_calls.SYNTAX,
    tags.XML_SYNTAX,
    tags.KV_SYNTAX,
    mistral.SYNTAX,
    pythonic.SYNTAX,
    gemma.GEMMA4,
    gemma.FUNCTION_GEMMA,
    harmony.SYNTAX,
    deepseek.SYNTAX,
    deepseek_r1.SYNTAX,
    kimi.SYNTAX,
    minimax.SYNTAX,
    dsml.SYNTAX,
)}

__all__ = ["SYNTAXES", "Syntax"]
