"""DeepSeek's older call format (V3, V3-0324, R1, R1-0528 and its distills): DeepSeek V3.1's section (``deepseek.py``)
with the call's type for a head, the name after the separator on a line of its own, the arguments in a fence, the
calls a line apart, as their templates write an assistant turn's calls:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {json}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>…<｜tool▁call▁end｜><｜tool▁calls▁end｜>

- decoder: ``deepseek.SectionCalls`` with this ``Section`` row (any one-word type is read, as vLLM's
  deepseek_v3 parser does; a fence the model leaves out is not missed); checking grammar:
  ``grammars/deepseek_r1.lark``;
- forcing: as V3.1's, the head spelled ``function SEP NAME`` and the arguments fenced, the template's layout;
- rendering: as the template writes the calls; history: arguments as JSON text (the template concatenates them).
"""

from __future__ import annotations

from ...structured.tool_calls import marker
from .base import CallsTransformer, dumps
from .deepseek import DEEPSEEK, Section, _arguments_as_text, section_syntax

SEP = DEEPSEEK.sep


def _head_rule(quoted: str, vocab: dict) -> str:
    return f'"function" {marker(SEP, vocab)} {quoted}'


R1 = Section(DEEPSEEK.call_open, SEP, DEEPSEEK.call_close, DEEPSEEK.name_of, lambda name, i: "function", _head_rule,
             fence=("```json", "```"), between="\n")


class Transformer(CallsTransformer):
    def start(self, calls):
        return calls

    def call(self, children):  # the type, the name, the arguments
        return str(children[1]), dumps(children[2])


SYNTAX = section_syntax("deepseek_r1", "deepseek_r1.lark", R1, Transformer, history=_arguments_as_text)
