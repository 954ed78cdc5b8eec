"""DeepSeek V3.2's DSML: MiniMax's invoke/parameter shape (``minimax.py``) with ``｜DSML｜`` tags, and a
``string`` attribute on each parameter saying how its value is written:

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>
    <｜DSML｜parameter name="N" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

- decoder: the tag decoder with the ``DSML`` row; a key's ``string`` attribute decides its value's type
  (``"true"``: the text, streamed as written; ``"false"``: JSON, converted when it ends);
- checking grammar: ``grammars/dsml.lark``;
- forcing: ``structured/xml_calls.py`` with the ``DSML_TAGS`` row (``string`` written from the schema's type);
- rendering: as the template writes them.
"""

from __future__ import annotations

import json

from ...structured.tool_calls import section_blocks
from ...structured.xml_calls import Tags, tag_call_rules
from ..bodies.tagged import TagSpec, TaggedCall, convert_value
from .base import CallsTransformer, Syntax, arguments_value, dumps

DSML = TagSpec('<｜DSML｜invoke name="', ('">',), '<｜DSML｜parameter name="', '">', "", "</｜DSML｜parameter>",
               "</｜DSML｜invoke>", "none", False, repeat=True)
DSML_TAGS = Tags('<｜DSML｜invoke name="{name}">\n', '<｜DSML｜parameter name="{key}" string="{string}">',
                 "</｜DSML｜parameter>", "", "\n", "</｜DSML｜invoke>", True)


class DsmlCall(TaggedCall):
    """The tag decoder, a key read with its ``string`` attribute (``KEY" string="true``, up to ``">``)."""

    def _step(self, out: list) -> bool:
        if self.state != "key":
            return super()._step(out)
        i = self.buf.find(self.spec.key_close)
        if i < 0:
            return False
        head, self.buf = self.buf[:i], self.buf[i + len(self.spec.key_close):]
        key, _, attrs = head.partition('"')
        self.kind = "typed" if 'string="false' in attrs else "string"
        self.typ = None if self.kind == "typed" else "string"
        self._emit(out, ("{" if self.nkeys == 0 else ", ") + json.dumps(key.strip(), ensure_ascii=False) + ": "
                   + ('"' if self.kind == "string" else ""))
        self.nkeys += 1
        self.value, self.typed, self.value_started, self.state = "", "", False, "value"
        return True


class Transformer(CallsTransformer):
    def start(self, calls):
        return calls

    def invoke(self, children):
        name = str(children[0])[len('<｜DSML｜invoke name="'):-len('">')]
        args = {}
        for tok in children[1:]:
            head, _, value = str(tok)[len('<｜DSML｜parameter name="'):-len("</｜DSML｜parameter>")].partition('">')
            key, _, attrs = head.partition('"')
            args[key] = convert_value(value.strip(), None, False) if 'string="false' in attrs else value
        return name, dumps(args)


def decoder(calls, markup, tentative=False):
    return DsmlCall(calls, markup, DSML, tentative)


def blocks(family, tools, parallel, vocab, loose=False):
    return section_blocks(family, *tag_call_rules(DSML_TAGS, tools, vocab, loose), parallel, vocab)


def render(calls, family) -> str:
    m = family.markup
    invokes = []
    for name, args in calls:
        params = "\n".join(
            f'<｜DSML｜parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
            f'{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</｜DSML｜parameter>'
            for k, v in (arguments_value(args) or {}).items())
        invokes.append(f'\n<｜DSML｜invoke name="{name}">\n{params}\n</｜DSML｜invoke>')
    return f"{m.tool_open}{''.join(invokes)}\n{m.tool_close}"


SYNTAX = Syntax("dsml", "dsml.lark", Transformer, decoder, blocks, render, auto=True)
