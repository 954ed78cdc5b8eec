"""What a tool-call syntax is: the one record that owns its four parts.

A ``Syntax`` is how a model writes the inside of a tool call. One module per syntax (this package) builds one
(or a few close variants) and owns, for it:

- ``decoder``: the streaming decoder of a call block (``Body``: name as soon as known, arguments as deltas);
- ``grammar`` + ``transformer``: the Lark file in ``grammars/`` that checks every completed block, and the
  transformer that reads its tree into ``[(name, arguments JSON)]`` (``grammar.py`` runs them);
- ``blocks``: the Lark rules that force a call in this markup (forced tool choice, strict tools and custom
  tools under ``auto``), or None where no such grammar is written (a forced call is then refused by name);
- ``render``: how past calls are written back into a prompt where the template cannot render them itself,
  exactly as the model writes them (markers included), so that decoding the rendering gives the calls back;
- ``answer``: where an output format (JSON schema) sits inside the syntax's markup (harmony's final channel);
- ``history``: a last touch on the message dicts before the model's own template renders them (the shape
  that template expects: argument strings, call ids).

A family (``families/__init__.py``) is a row that names its syntax; ``tests/test_syntax_contract.py`` walks every
syntax through the same contract.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from lark import Transformer

from ..bodies.base import Calls
from ..bodies.tagged import _STRING_TYPES, convert_value


def _no_history(messages: list[dict]) -> list[dict]:
    return messages


@dataclass(frozen=True)
class Syntax:
    name: str
    grammar: str  # file in grammars/ (json_value.lark is shared by the formats whose arguments are JSON)
    transformer: Callable[[str, dict | None], Transformer]
    # (calls, markup, tentative) -> Body; None where the syntax reads the whole output itself (harmony)
    decoder: Callable[..., Any] | None
    # (family, tools, parallel, vocab, loose) -> lark rules defining ``blocks``; None: no forcing grammar
    blocks: Callable[..., list[str]] | None = None
    # (calls [(name, arguments value)], markup) -> the text the model writes for them
    render: Callable[[list[tuple[str, Any]], Any], str] | None = None
    history: Callable[[list[dict]], list[dict]] = _no_history
    # (output format Grammar, vocab) -> the grammar the answer is masked with, where it sits inside markup
    answer: Callable[..., Any] | None = None
    # free text and a masked call can stand side by side under tool_choice auto (the markers are tokens)
    auto: bool = False
    inner_markers: tuple[str, ...] = field(default=())  # tokens besides the block's own that auto must see whole
    delimiter: str | None = None  # the string delimiter token, where the syntax has one (Gemma)


# ---------------------------------------------------------------------------------------------------------
# Reading a grammar's tree into calls: the base every syntax's transformer extends
# ---------------------------------------------------------------------------------------------------------

def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def trim_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


class CallsTransformer(Transformer):
    """Rules imported from another grammar come namespaced (``json_value__object``): they are dispatched by
    their own name. JSON values become Python values."""

    def __init__(self, fmt: str, tools: dict[str, dict] | None):
        super().__init__()
        self.fmt = fmt
        self.types = Calls(tools=tools or {})

    def __default__(self, data, children, meta):
        short = str(data).rsplit("__", 1)[-1]
        if short != data and hasattr(self, short):
            return getattr(self, short)(children)
        return super().__default__(data, children, meta)

    # json_value.lark
    def object(self, children):
        return dict(children)

    def pair(self, children):
        return json.loads(children[0]), children[1]

    def array(self, children):
        return list(children)

    def string(self, children):
        return json.loads(children[0])

    def number(self, children):
        return json.loads(children[0])

    def true(self, _):
        return True

    def false(self, _):
        return False

    def null(self, _):
        return None

    def _typed(self, name: str, key: str, text: str, unknown_is_string: bool, trim) -> object:
        typ = self.types.param_type(name, key)
        if typ in _STRING_TYPES or (typ is None and unknown_is_string):
            return text
        return convert_value(trim(text), typ, unknown_is_string)


def arguments_value(args) -> Any:
    """A call's arguments as a value (a JSON text is read; anything else is kept)."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args
