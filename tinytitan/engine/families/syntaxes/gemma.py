"""Gemma 4 and FunctionGemma: ``call:NAME{key:<|"|>text<|"|>,n:2}`` between their call tokens (FunctionGemma
delimits strings with ``<escape>``).

- decoder: ``body_calls.GemmaCall`` with the string delimiter; checking grammars: ``grammars/gemma4.lark``,
  ``grammars/function_gemma.lark``;
- forcing: none yet (a forced call is refused by name);
- rendering: ``call:NAME{…}`` with bare keys, strings between the delimiter, other values as JSON.
"""

from __future__ import annotations

import json

from ..bodies.calls import GemmaCall
from .base import CallsTransformer, Syntax, arguments_value, dumps


class Transformer(CallsTransformer):
    DELIMITERS = {"gemma4": '<|"|>', "function_gemma": "<escape>"}

    def start(self, calls):
        return calls

    def call(self, children):
        return str(children[0])[len("call:"):], dumps(children[1])

    def object(self, children):
        return dict(children)

    def pair(self, children):
        return children[0], children[1]

    def bare_key(self, children):
        return str(children[0])

    def string_key(self, children):
        return self._unquote(children[0])

    def string(self, children):
        return self._unquote(children[0])

    def bare(self, children):
        text = str(children[0])
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _unquote(self, token) -> str:
        n = len(self.DELIMITERS[self.fmt])
        return str(token)[n:-n]


def _value(value, delim: str) -> str:
    if isinstance(value, str):
        return f"{delim}{value}{delim}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value(v, delim)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_value(v, delim) for v in value) + "]"
    return json.dumps(value)


def _renderer(delim: str):
    def render(calls, family) -> str:
        m = family.markup
        return "".join(f"{m.tool_open}call:{name}{_value(arguments_value(args) or {}, delim)}{m.tool_close}"
                       for name, args in calls)
    return render


def _decoder(delim: str):
    return lambda calls, markup, tentative=False: GemmaCall(calls, markup, delim, tentative)


GEMMA4 = Syntax("gemma4", "gemma4.lark", Transformer, _decoder('<|"|>'), None, _renderer('<|"|>'),
                delimiter='<|"|>')
FUNCTION_GEMMA = Syntax("function_gemma", "function_gemma.lark", Transformer, _decoder("<escape>"), None,
                        _renderer("<escape>"), delimiter="<escape>")
