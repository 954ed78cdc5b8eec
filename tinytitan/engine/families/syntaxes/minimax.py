"""MiniMax M2: the calls of a turn in one ``<minimax:tool_call>`` block, each an ``<invoke>`` with one
``<parameter>`` tag a value:

    <minimax:tool_call>
    <invoke name="NAME">
    <parameter name="KEY">VALUE</parameter>
    </invoke>
    </minimax:tool_call>

- decoder: ``body_tagged.TaggedCall`` with the ``INVOKE`` tag row (several invokes a block; a string value
  streams as written, any other is converted when it ends, typed by the tool's schema);
- checking grammar: ``grammars/minimax.lark``;
- forcing: ``structured/xml_calls.py`` with the ``INVOKE_TAGS`` row (values verbatim, never holding their
  closing tag), all the calls in one block;
- rendering: as the template writes them — a string verbatim, any other value as JSON.
"""

from __future__ import annotations

import json

from ...structured.tool_calls import section_blocks
from ...structured.xml_calls import Tags, tag_call_rules
from ..bodies.tagged import TagSpec, TaggedCall
from .base import CallsTransformer, Syntax, arguments_value, dumps

INVOKE = TagSpec('<invoke name="', ('">',), '<parameter name="', '">', "", "</parameter>", "</invoke>", "none",
                 False, repeat=True)
INVOKE_TAGS = Tags('<invoke name="{name}">\n', '<parameter name="{key}">', "</parameter>", "", "\n", "</invoke>",
                   False)


class Transformer(CallsTransformer):
    def start(self, calls):
        return calls

    def invoke(self, children):
        name = str(children[0])[len('<invoke name="'):-len('">')]
        args = children[1] if len(children) > 1 else {}
        if isinstance(args, list):  # parameter tags
            args = {key: self._typed(name, key, value, False, str.strip) for key, value in args}
        return name, dumps(args)

    def parameters(self, tokens):
        out = []
        for tok in tokens:
            key, _, value = str(tok)[len('<parameter name="'):-len("</parameter>")].partition('">')
            out.append((key, value))
        return out


def decoder(calls, markup, tentative=False):
    return TaggedCall(calls, markup, INVOKE, tentative)


def blocks(family, tools, parallel, vocab, loose=False):
    return section_blocks(family, *tag_call_rules(INVOKE_TAGS, tools, vocab, loose), parallel, vocab)


def render(calls, family) -> str:
    m = family.markup
    invokes = []
    for name, args in calls:
        params = "".join(f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}'
                         "</parameter>\n" for k, v in (arguments_value(args) or {}).items())
        invokes.append(f'<invoke name="{name}">\n{params}</invoke>\n')
    return f"{m.tool_open}\n{''.join(invokes)}{m.tool_close}"


SYNTAX = Syntax("minimax", "minimax.lark", Transformer, decoder, blocks, render, auto=True)
