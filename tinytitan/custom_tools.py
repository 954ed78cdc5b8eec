"""Custom (freeform) tools: the model writes a call's ``input`` as text, optionally under a client grammar.

Rules:
- A custom tool reaches the model as a function of one string parameter, ``input`` (its description says
  what the input must match); a call to it comes back to the client as a custom tool call carrying that
  string. A custom tool call sent back in a conversation is rendered the same way (``{"input": …}``).
- ``format``: ``{"type": "text"}`` (or none) is any text; ``{"type": "grammar", "syntax": "lark" | "regex",
  "definition": …}`` is a grammar the engine compiles (a grammar it cannot compile is refused by name) and
  masks the input with while the model writes it.
- ``input_of`` reads the input out of the call's arguments as far as they have arrived (a JSON string may be
  cut inside an escape), so the input can stream.
"""

from __future__ import annotations

import json
import re

from .chat_request import Grammar, Tool
from .errors import invalid

SYNTAXES = ("lark", "regex")
_HEAD = re.compile(r'\s*\{\s*"input"\s*:\s*"')
# an escape cut short at the end of the text read so far: it starts at a backslash that is not itself escaped
# (after an even run of backslashes, kept as group 1): three backslashes are an escaped one and a cut escape
_CUT_ESCAPE = re.compile(r'(?<!\\)((?:\\\\)*)'
                         r'(?:\\u[0-9a-fA-F]{0,3}|\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u?[0-9a-fA-F]{0,3})?|\\)$')


def parse(tool: dict, where: str) -> Tool:
    """A ``{"type": "custom", "name", "description", "format"}`` tool (Responses; Chat nests it in ``custom``)."""
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(f"Missing required parameter: '{where}.name'", param=f"{where}.name",
                      code="missing_required_parameter")
    description = tool.get("description") or ""
    if not isinstance(description, str):
        raise invalid(f"Invalid type for '{where}.description': expected a string", param=f"{where}.description",
                      code="invalid_type")
    fmt = tool.get("format") or {"type": "text"}
    grammar = None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise invalid(f"Invalid value for '{where}.format': expected {{'type': 'text'}} or {{'type': 'grammar', "
                      "'syntax': 'lark' | 'regex', 'definition': …}", param=f"{where}.format", code="invalid_value")
    if fmt["type"] == "grammar":
        syntax = fmt.get("syntax")
        if syntax not in SYNTAXES:
            raise invalid(f"Invalid value for '{where}.format.syntax': {json.dumps(syntax)} is not one of "
                          f"{list(SYNTAXES)}", param=f"{where}.format.syntax", code="invalid_value")
        definition = fmt.get("definition")
        if not isinstance(definition, str) or not definition.strip():
            raise invalid(f"Missing required parameter: '{where}.format.definition'",
                          param=f"{where}.format.definition", code="missing_required_parameter")
        grammar = Grammar(syntax, definition, name, where=f"{where}.format.definition")
    what = "Freeform text." if grammar is None else \
        f"It must match this {grammar.kind} grammar:\n{grammar.source}"
    parameters = {"type": "object", "properties": {"input": {"type": "string", "description": f"The tool's input. {what}"}},
                  "required": ["input"], "additionalProperties": False}
    return Tool(name, description, parameters, custom=True, input_grammar=grammar)


def input_of(arguments: str, done: bool = False) -> str:
    """The ``input`` string of a custom call's arguments. While they arrive (``done`` false), only what cannot
    change: bare text (a parser hands a string's text on bare) as it is, the ``{"input": "…`` string as far as it
    has arrived, else nothing yet — so each reading extends the last. Once the call is done, a call whose
    arguments are not ``{"input": string}`` is taken as the input itself: its one JSON string, or its text."""
    if not arguments.strip():
        return ""
    if not arguments.lstrip().startswith(("{", '"')):
        return arguments
    try:
        whole = json.loads(arguments)
    except ValueError:
        pass
    else:
        if isinstance(whole, dict) and isinstance(whole.get("input"), str):
            return whole["input"]
        if done and isinstance(whole, str):  # the input written as the arguments' one JSON string
            return whole
        if done:  # complete, of another shape: the input itself
            return "" if whole == {} else arguments.strip()
    head = _HEAD.match(arguments)
    if head is None:  # text opening with '{' or '"' that is no {"input": …}: the input, once whole
        return arguments.strip() if done else ""
    body = arguments[head.end():]
    end = re.search(r'(?<!\\)(?:\\\\)*"', body)
    if end is not None:
        body = body[:end.end() - 1]
    body = _CUT_ESCAPE.sub(r"\1", body)
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return ""


def input_delta(before: str, now: str) -> str | None:
    """What a later reading of a call's input adds to an earlier one (a stream's delta); None where it adds
    nothing. Each reading extends the last (``input_of``), so a client joining the deltas holds the input."""
    return now[len(before):] if len(now) > len(before) and now.startswith(before) else None
