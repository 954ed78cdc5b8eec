"""Mistral's calls after ``[TOOL_CALLS]``: ``NAME[ARGS]{json}`` (tokenizers with an ``[ARGS]`` token) or a JSON
list of call objects (older ones). A call has no closing marker: it runs to the next ``[TOOL_CALLS]`` or the end.

- decoder: ``body_calls.MistralCall``; checking grammar: ``grammars/mistral.lark``;
- forcing: ``[TOOL_CALLS]NAME[ARGS]{…}`` per call where the vocabulary has ``[ARGS]``, else the list form, the
  JSON spaced as the template's ``tojson`` writes it;
- rendering: ``[TOOL_CALLS]NAME[ARGS]{json}`` per call.
"""

from __future__ import annotations

import json

from ...structured.tool_calls import json_call_rules, marker, more_calls
from ..bodies.calls import MistralCall
from .base import Syntax, arguments_value, dumps
from .json_calls import Transformer as JsonTransformer


class Transformer(JsonTransformer):
    def start(self, children):
        return children[0] if isinstance(children[0], list) else [children[0]]

    def named_call(self, children):
        return str(children[0]), dumps(children[-1])


def blocks(family, tools, parallel, vocab, loose=False):
    open_ = marker(family.markup.tool_open, vocab)
    if "[ARGS]" in vocab:
        call, rules = json_call_rules(tools, "arguments", loose, named=marker("[ARGS]", vocab))
        return [f"blocks: {open_} call" + more_calls(f"{open_} call", parallel), call, *rules]
    call, rules = json_call_rules(tools, "arguments", loose)
    return [f'blocks: {open_} "[" call' + more_calls('", " call', parallel) + ' "]"', call, *rules]


def render(calls, family) -> str:
    return "".join(f"{family.markup.tool_open}{name}[ARGS]{json.dumps(arguments_value(args), ensure_ascii=False)}"
                   for name, args in calls)


SYNTAX = Syntax("mistral", "mistral.lark", Transformer, MistralCall, blocks, render, auto=True)
