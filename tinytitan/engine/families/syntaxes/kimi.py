"""Kimi K2: DeepSeek's section shape (``deepseek.py``) with Kimi's markers, and a call id for a head:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{json}
    <|tool_call_end|>…<|tool_calls_section_end|>

The id is ``functions.NAME:INDEX``, INDEX counting the calls of the conversation; the name is read from it.

- decoder: ``deepseek.SectionCalls`` with Kimi's ``Section`` row; checking grammar: ``grammars/kimi.lark``;
- forcing: as DeepSeek's, the head spelled ``functions.NAME:INDEX``;
- rendering: the section with ids counted from 0; history: a call id the template writes (K2-Thinking's
  ``tool_call['id']``, and each result's ``tool_call_id``) becomes ``functions.NAME:INDEX``, consistently.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .base import CallsTransformer, dumps
from .deepseek import Section, section_syntax

_ID = re.compile(r"\s*(?:functions\.)?([^\s<>{}:]+):\d+\s*")


def _name_of(head: str) -> str | None:
    m = _ID.fullmatch(head)
    return m.group(1) if m else None


KIMI = Section("<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", _name_of,
               lambda name, i: f"functions.{name}:{i}",
               lambda quoted, vocab: f'"functions." {quoted} ":" KIMI_INDEX')


class Transformer(CallsTransformer):
    def start(self, calls):
        return calls

    def call(self, children):
        return _name_of(str(children[0])), dumps(children[1])


def _kimi_ids(messages: list[dict]) -> list[dict]:
    ids: dict[str, str] = {}  # a client's call id -> the Kimi id of the latest call that bore it
    count = 0
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:  # each call its own id, named after its own function (a client may reuse
                kid = f"functions.{c['function']['name']}:{count}"  # an id in a later turn)
                count += 1
                if c.get("id"):
                    ids[c["id"]] = kid
                calls.append({**c, "id": kid})
            m = {**m, "tool_calls": calls}
        elif m.get("role") == "tool" and m.get("tool_call_id") in ids:
            m = {**m, "tool_call_id": ids[m["tool_call_id"]]}
        out.append(m)
    return out


_BASE = section_syntax("kimi", "kimi.lark", KIMI, Transformer, history=_kimi_ids)


def _blocks(family, tools, parallel, vocab, loose=False):
    return [*_BASE.blocks(family, tools, parallel, vocab, loose), "KIMI_INDEX: /[0-9]{1,3}/"]


SYNTAX = replace(_BASE, blocks=_blocks)
