"""Python calls, ``NAME(key=value, …)``, in Gemma 3's ```` ```tool_code ```` fences.

- decoder: ``body_calls.PythonicCall`` (the name as soon as its ``(`` comes; the arguments are read whole when
  the fence closes, as Python literals); checking grammar: ``grammars/pythonic.lark``;
- forcing: keyword arguments in the schema's order, each value JSON held to its schema
  (``structured/tool_calls.pythonic_call_rules``); custom tools are refused by name;
- rendering: ```` ```tool_code\\nNAME(k=v)\\n``` ````, values as Python literals.
"""

from __future__ import annotations

import ast
import json

from ...structured.tool_calls import marked_blocks, pythonic_call_rules
from ..bodies.calls import PythonicCall
from .base import CallsTransformer, Syntax, arguments_value, dumps


class Transformer(CallsTransformer):
    def start(self, calls):
        return calls

    def call(self, children):
        kwargs = dict(children[1:])
        return str(children[0]), dumps(kwargs)

    def kwarg(self, children):
        return str(children[0]), children[1]

    def string(self, children):
        return ast.literal_eval(children[0])

    def number(self, children):
        return ast.literal_eval(children[0])

    def constant(self, children):
        return {"True": True, "true": True, "False": False, "false": False}.get(str(children[0]))

    def list(self, children):
        return children

    tuple = list

    def dict(self, children):
        return {k: v for k, v in children}

    def entry(self, children):
        return children[0], children[1]


def _py_literal(value) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def blocks(family, tools, parallel, vocab, loose=False):
    call, rules = pythonic_call_rules(tools)
    return marked_blocks(family, call, rules, parallel, vocab)


def render(calls, family) -> str:
    m = family.markup
    out = []
    for name, args in calls:
        args = arguments_value(args)
        inner = ", ".join(f"{k}={_py_literal(v)}" for k, v in args.items()) if isinstance(args, dict) else str(args)
        out.append(f"{m.tool_open}\n{name}({inner})\n{m.tool_close}")
    return "\n".join(out)


SYNTAX = Syntax("pythonic", "pythonic.lark", Transformer, PythonicCall, blocks, render)
