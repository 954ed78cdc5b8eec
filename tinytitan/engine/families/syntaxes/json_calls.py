"""JSON call objects: ``{"name": N, "arguments": {…}}`` (Qwen / Qwen2.5 ``<tool_call>`` blocks, Llama 3.x's
``<|python_tag|>`` and bare answers with ``"parameters"``), one, several, or a list.

- decoder: ``body_json.JsonCalls`` (the name as soon as its string ends, the arguments object streamed as
  written);
- checking grammar: ``grammars/json.lark``;
- forcing: one ``{"name":N,"arguments":{…}}`` object per block, arguments held to the tool's schema
  (``structured/tool_calls.py`` spells the objects); Llama's one call per turn, with ``parameters``;
- rendering: each call as its own block, ``<tool_call>\\n{json}\\n</tool_call>``.
"""

from __future__ import annotations

import json

from ...structured.tool_calls import json_call_rules, marked_blocks
from ..bodies.json_objects import JsonCalls
from .base import CallsTransformer, Syntax, arguments_value, dumps


class Transformer(CallsTransformer):
    def start(self, children):
        return [c for c in children if isinstance(c, tuple)]

    json_calls = start

    def call(self, members):
        names = [v for k, v in members if k == "name"]
        nested = [v for k, v in members if k == "function"]
        if nested:
            return nested[0]
        if len(names) != 1:
            raise ValueError(f"a call object needs one \"name\" (has {len(names)})")
        args = next((v for k, v in members if k == "arguments"), {})
        if isinstance(args, str):  # arguments written as a JSON string holding JSON: that JSON
            return names[0], args
        return names[0], dumps(args)

    def name(self, children):
        return "name", json.loads(children[1])

    def arguments(self, children):
        return "arguments", children[1]

    def function(self, children):
        return "function", children[1]

    def other(self, children):
        return "other", None


def blocks(family, tools, parallel, vocab, loose=False):
    call, rules = json_call_rules(tools, family.call_key, loose)
    return marked_blocks(family, call, rules, parallel, vocab)


def render(calls, family) -> str:
    m = family.markup
    out = []
    for name, args in calls:
        body = json.dumps({"name": name, family.call_key: arguments_value(args)}, ensure_ascii=False)
        out.append(f"{m.tool_open}\n{body}\n{m.tool_close}" if m.tool_close else f"{m.tool_open or ''}{body}")
    return "\n".join(out)


SYNTAX = Syntax("json", "json.lark", Transformer, JsonCalls, blocks, render, auto=True)
