"""Calls whose arguments are tags, one a value: Qwen3-Coder's XML and GLM's key/value pairs.

    xml (Qwen3-Coder, Qwen3.5)                kv (GLM 4.5 / 4.6 / 4.7)
    <tool_call>                               <tool_call>NAME
    <function=NAME>                           <arg_key>KEY</arg_key>
    <parameter=KEY>                           <arg_value>VALUE</arg_value>
    VALUE                                     </tool_call>
    </parameter>
    </function>
    </tool_call>

- decoder: ``body_tagged.TaggedCall`` with the syntax's ``TagSpec`` (a string value streams as written, any
  other is converted when it ends, typed by the tool's schema);
- checking grammars: ``grammars/xml.lark``, ``grammars/kv.lark``;
- forcing: ``structured/xml_calls.py`` with the syntax's ``Tags`` row (values verbatim, never holding their
  closing tag);
- rendering: the tags, a string verbatim and any other value as JSON (as the templates write them).
"""

from __future__ import annotations

import json

from ...structured.tool_calls import marked_blocks
from ...structured.xml_calls import TAGS, tag_call_rules
from ..bodies.tagged import KV, XML, TaggedCall
from .base import CallsTransformer, Syntax, arguments_value, dumps, trim_newline


def _value_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# -- xml ------------------------------------------------------------------------------------------------
class XmlTransformer(CallsTransformer):
    def start(self, calls):
        return calls

    def function(self, children):
        name = str(children[0])[len("<function="):-1].strip()
        args = children[1] if len(children) > 1 else {}
        if isinstance(args, list):  # parameter tags
            args = {key: self._typed(name, key, value, True, str) for key, value in args}
        return name, dumps(args)

    def parameters(self, tokens):
        out = []
        for tok in tokens:
            key, _, value = str(tok)[len("<parameter="):-len("</parameter>")].partition(">")
            value = value[1:] if value.startswith("\n") else value
            out.append((key.strip(), trim_newline(value)))
        return out


def xml_blocks(family, tools, parallel, vocab, loose=False):
    call, rules = tag_call_rules(TAGS["xml"], tools, vocab, loose)
    return marked_blocks(family, call, rules, parallel, vocab)


def xml_render(calls, family) -> str:
    m = family.markup
    out = []
    for name, args in calls:
        params = "".join(f"<parameter={k}>\n{_value_text(v)}\n</parameter>\n"
                         for k, v in (arguments_value(args) or {}).items())
        out.append(f"{m.tool_open}\n<function={name}>\n{params}</function>\n{m.tool_close}")
    return "\n".join(out)


XML_SYNTAX = Syntax("xml", "xml.lark", XmlTransformer, lambda calls, markup, tentative=False:
                    TaggedCall(calls, markup, XML, tentative), xml_blocks, xml_render, auto=True)


# -- kv -------------------------------------------------------------------------------------------------
class KvTransformer(CallsTransformer):
    def start(self, children):
        name = str(children[0])
        args = children[1] if len(children) > 1 else {}
        if isinstance(args, list):
            args = {key: self._typed(name, key, value, False, str.strip) for key, value in args}
        return [(name, dumps(args))]

    def args(self, children):
        return children

    def arg(self, children):
        key = str(children[0])[len("<arg_key>"):-len("</arg_key>")].strip()
        return key, str(children[1])[len("<arg_value>"):-len("</arg_value>")]


def kv_blocks(family, tools, parallel, vocab, loose=False):
    call, rules = tag_call_rules(TAGS["kv"], tools, vocab, loose)
    return marked_blocks(family, call, rules, parallel, vocab, inner="call")  # the name right after the marker


def kv_render(calls, family) -> str:
    m = family.markup
    out = []
    for name, args in calls:
        pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_value_text(v)}</arg_value>\n"
                        for k, v in (arguments_value(args) or {}).items())
        out.append(f"{m.tool_open}{name}\n{pairs}{m.tool_close}")
    return "\n".join(out)


KV_SYNTAX = Syntax("kv", "kv.lark", KvTransformer, lambda calls, markup, tentative=False:
                   TaggedCall(calls, markup, KV, tentative), kv_blocks, kv_render, auto=True)
