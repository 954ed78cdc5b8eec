"""gpt-oss (harmony): output formats and forced calls inside its channel markup.

    answer:  <|channel|>final<|message|>DOCUMENT                         (then <|return|>)
    call:    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{ARGUMENTS}   (then <|call|>)

Rules:
- The prompt ends with ``<|start|>assistant``: the grammar starts at the channel marker, skipping the
  analysis channel (such a request decodes with reasoning off), and ends where the document or the
  arguments end; the end-of-sequence tokens (``<|return|>``, ``<|call|>``) are allowed only there.
- The harmony markers are matched as the vocabulary's tokens.
- One call (the family's convention); a custom tool's input grammar is refused by name for a forced call.
- A call's arguments are compact or spaced JSON, one space at most between tokens (the harmony renderer writes
  them as given, gpt-oss's template with ``tojson``'s spaces); an output format's document is compact.
"""

from __future__ import annotations

import json

from ...chat_request import Grammar, Tool
from ...errors import invalid
from .compile import ONE_SPACE, arguments_schema, custom_tool_refused, json_rule, with_format_patterns

MARKERS = ("<|channel|>", "<|constrain|>", "<|message|>")


def _markers(vocab: dict) -> tuple[str, str, str]:
    missing = [m for m in MARKERS if m not in vocab]
    if missing:
        raise invalid(f"This model's harmony markup has no {missing[0]} token to hold a grammar to",
                      param="tool_choice", code="unsupported_value")
    return tuple(f"<[{vocab[m]}]>" for m in MARKERS)


def answer_grammar(grammar: Grammar, vocab: dict) -> Grammar:
    """An output format (a JSON schema or json_object) as the document of the final channel."""
    channel, _, message = _markers(vocab)
    schema = grammar.source if grammar.kind == "json_schema" else {"type": "object"}
    doc = json_rule(with_format_patterns(schema))  # as structured output's own JSON grammar (compile.py)
    return Grammar("lark", "\n".join([f'start: {channel} "final" {message} doc', f"doc: {doc}"]),
                   where=grammar.where, name=grammar.name)


def call_blocks(tools: list[Tool], vocab: dict) -> list[str]:
    """The rule ``blocks``: one call message's header and JSON arguments, to any of ``tools``."""
    channel, constrain, message = _markers(vocab)
    rules = []
    for i, tool in enumerate(tools):
        if tool.custom:
            raise custom_tool_refused(tool.name, "harmony calls")
        rules += [f"f{i}: {json.dumps(tool.name + ' ')} {constrain} \"json\" {message} f{i}_args",
                  f"f{i}_args: {json_rule(arguments_schema(tool.parameters), ONE_SPACE)}"]
    call = "call: " + " | ".join(f"f{i}" for i in range(len(tools)))
    return [f'blocks: {channel} "commentary to=functions." call', call, *rules]


def forced_calls(tools: list[Tool], vocab: dict) -> Grammar:
    return Grammar("lark", "\n".join(["start: blocks", *call_blocks(tools, vocab)]), where="tool_choice")
