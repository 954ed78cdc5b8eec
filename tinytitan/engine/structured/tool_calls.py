"""Forced tool calls: a grammar that admits only calls, in the model family's own markup, to the tools a
request allows, with arguments that match each tool's JSON schema.

Rules:
- Families whose calls are JSON objects (``Markup.body == "json"``) are served: Qwen-style blocks
  (``<tool_call>\\n{"name": N, "arguments": {…}}\\n</tool_call>``, several when parallel calls are allowed)
  and Llama 3's ``<|python_tag|>{"name": N, "parameters": {…}}`` (one call). Another family's markup is
  refused by name (400), never approximated.
- A marker that is one token of the vocabulary is matched as that token (``<[id]>``), else as text.
- A custom tool's input is its one JSON string argument, ``input``: the client's grammar (Lark or regex) is
  rewritten to match the input's JSON-escaped spelling (``escaped.py``), so the input the client reads back
  matches the grammar it sent; a text-format custom tool's input is any text.
- Each candidate function tool's schema goes through the same keyword table as structured output: a keyword the
  grammar cannot promise is refused by name.
"""

from __future__ import annotations

import json

from ...chat_request import Grammar, Tool
from ...errors import ApiError, invalid
from ...output_format import check_schema
from .compile import JSON_OPTIONS, compile_grammar
from .escaped import ANY_TEXT, escaped_lark_rules

ARGUMENTS_KEY = {"llama3": "parameters"}  # default "arguments"
SINGLE_CALL = {"llama3"}  # formats that carry one call per turn


def _marker(text: str, vocab: dict) -> str:
    token = vocab.get(text)
    return f"<[{token}]>" if token is not None else json.dumps(text)


def custom_input_rules(tool: Tool, prefix: str) -> tuple[list[str], str]:
    """Rules for a custom tool's input as written inside its JSON arguments → (rules, start rule)."""
    if tool.input_grammar is None:
        return [f"{prefix}_s: {ANY_TEXT}"], f"{prefix}_s"
    return escaped_lark_rules(tool.input_grammar, prefix)


def check_custom_grammar(tool: Tool, tokenizer, vocab_size: int | None) -> None:
    """A custom tool's grammar is compiled when the request comes in: one that cannot be is refused by name."""
    rules, start = custom_input_rules(tool, "c")
    compile_grammar(Grammar("lark", "\n".join([f"start: {start}", *rules]), where=tool.input_grammar.where),
                    tokenizer, vocab_size)


def call_schema(tools: list[Tool], arguments_key: str) -> dict:
    """One call object to any of ``tools``: its name, and arguments matching that tool's schema."""
    options = []
    for tool in tools:
        options.append({"type": "object", "properties": {"name": {"const": tool.name},
                                                          arguments_key: tool.parameters or {"type": "object"}},
                        "required": ["name", arguments_key], "additionalProperties": False})
    schema = dict(options[0]) if len(options) == 1 else {"anyOf": options}
    schema["x-guidance"] = JSON_OPTIONS  # compact and strict, as structured output
    return schema


def forced_call_grammar(family, tools: list[Tool], parallel: bool, vocab: dict) -> Grammar:
    markup = family.markup
    if markup is None or markup.body != "json" or not markup.tool_open:
        raise invalid(f"A forced tool call (tool_choice) cannot be enforced for this model: its family "
                      f"('{family.name}') writes calls in a markup this server has no call grammar for yet; use "
                      "tool_choice 'auto'", param="tool_choice", code="unsupported_value")
    for tool in tools:
        if tool.custom:
            continue
        try:
            check_schema(tool.parameters, f"tools.{tool.name}.parameters")
        except ApiError as exc:
            raise invalid(f"tool_choice forces a call to '{tool.name}', whose arguments must then match its schema: "
                          f"{exc.message}", param="tool_choice", code="unsupported_schema") from None
    key = ARGUMENTS_KEY.get(family.name, "arguments")
    functions = [t for t in tools if not t.custom]
    alternatives, rules = [], []
    if functions:
        alternatives.append("fcall")
        rules.append(f"fcall: %json {json.dumps(call_schema(functions, key), ensure_ascii=False)}")
    for i, tool in enumerate(t for t in tools if t.custom):
        # the input is the one string argument, written JSON-escaped: its grammar is rewritten to match that
        input_rules, start = custom_input_rules(tool, f"c{i}")
        head = json.dumps(f'{{"name":{json.dumps(tool.name)},"{key}":{{"input":"')
        alternatives.append(f"c{i}")
        rules += [f"c{i}: {head} {start} " + json.dumps('"}}'), *input_rules]
    call = "call: " + " | ".join(alternatives)
    open_ = _marker(markup.tool_open, vocab)
    if not markup.tool_close or family.name in SINGLE_CALL:
        heads = [f"start: {open_} call"]
    else:
        block = f'block: {open_} "\\n" call "\\n" {_marker(markup.tool_close, vocab)}'
        heads = ['start: block ("\\n" block)*' if parallel else "start: block", block]
    return Grammar("lark", "\n".join(heads + [call] + rules), where="tool_choice")
