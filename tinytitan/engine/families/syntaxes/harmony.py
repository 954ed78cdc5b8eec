"""gpt-oss's harmony: a call is a commentary message to ``functions.NAME`` whose body is its JSON arguments,
``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>``.

- decoder: the whole output is read by ``families/harmony_parser.py``'s ``HarmonyParser`` (channels decide
  reasoning, text and calls); checking grammar: ``grammars/harmony.lark``, once per call message;
- forcing: one call message (``structured/harmony_formats.py``); an output format is the final channel's
  message;
- rendering: the call message as the model writes it (the harmony templates render calls themselves).
"""

from __future__ import annotations

import json

from ...structured.harmony_formats import answer_grammar, call_blocks
from .base import CallsTransformer, Syntax, arguments_value, dumps


class Transformer(CallsTransformer):
    def start(self, children):
        return [(children[0], dumps(children[1]))]

    def header(self, children):
        recipient = next(str(c) for c in children if getattr(c, "type", "") == "RECIPIENT")[len("to="):]
        return recipient.removeprefix("functions.")

    def content_type(self, children):
        return None


def blocks(family, tools, parallel, vocab, loose=False):
    return call_blocks(tools, vocab)


def render(calls, family) -> str:
    return "".join(f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
                   f"{json.dumps(arguments_value(args), ensure_ascii=False)}<|call|>" for name, args in calls)


SYNTAX = Syntax("harmony", "harmony.lark", Transformer, None, blocks, render, answer=answer_grammar)
