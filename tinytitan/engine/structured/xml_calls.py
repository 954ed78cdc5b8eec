"""Forced calls in Qwen3-Coder's markup: arguments as parameter tags, each value verbatim.

    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>

Rules (the family's parser reads a value as the text up to the first ``</parameter>``, less one newline on
each side; a string-typed or untyped parameter as that text, any other as the JSON value it spells):
- A string parameter's value is raw text matching its schema (length bounds, enum / const, pattern, the date
  and time formats); it never contains ``</parameter>``. Its rule is lazy, with the closing tag inside its
  regex, so the value ends at the first closing tag and nowhere else.
- Any other typed parameter's value is JSON matching its schema.
- Parameters come in the schema's order; the required ones always, the others optionally.
- What the markup cannot carry is refused by name: a parameter without a type that is not an enum or const
  of strings, a string with other constraints (a format without a pattern of ours), custom tools, names or
  keys the tags cannot hold.
"""

from __future__ import annotations

import json
import re

from ...chat_request import Tool
from ...errors import invalid
from .compile import FORMAT_PATTERNS, JSON_OPTIONS

CLOSE = r"\n<\/parameter>"  # the value's layout newline and the closing tag, as a lark regex
_STRING_KEYS = {"type", "minLength", "maxLength", "enum", "const", "pattern", "format", "title", "description",
                "examples", "default", "$comment"}
_NAME = re.compile(r"[^\s<>{}]+")
_KEY = re.compile(r"[^\s<>]+")


def _literal(text: str) -> str:
    """``text`` as a regex matching exactly it (lark slashes escaped)."""
    return re.sub(r"([\\.^$|?*+()\[\]{}/\-])", r"\\\1", text)


def _refuse(tool: str, key: str, why: str):
    return invalid(f"tool_choice forces a call to '{tool}', whose parameter '{key}' cannot be enforced in this "
                   f"model's parameter tags: {why}", param="tool_choice", code="unsupported_schema")


def _first_type(schema: dict) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t


def _string_regexes(tool: str, key: str, schema: dict) -> list[str]:
    """The regexes a string value must match (all of them), each closed by the closing tag."""
    extra = set(schema) - _STRING_KEYS
    if extra:
        raise _refuse(tool, key, f"a string with {', '.join(sorted(extra))}")
    out = []
    choices = schema["enum"] if "enum" in schema else [schema["const"]] if "const" in schema else None
    if choices is not None:
        if not all(isinstance(c, str) for c in choices):
            raise _refuse(tool, key, "an enum or const of values that are not all strings")
        out.append("(?:" + "|".join(_literal(c) for c in choices) + ")")
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if lo is not None or hi is not None:
        out.append(f"(?s:.{{{int(lo or 0)},{'' if hi is None else int(hi)}}})")
    fmt = schema.get("format")
    if fmt is not None:
        if fmt not in FORMAT_PATTERNS:
            raise _refuse(tool, key, f"the format '{fmt}'")
        out.append(FORMAT_PATTERNS[fmt][1:-1])
    if "pattern" in schema:
        pattern = schema["pattern"]
        body = pattern[1:] if pattern.startswith("^") else "(?s:.*)" + pattern
        body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body + "(?s:.*)"
        out.append(body.replace("/", "\\/"))
    return [f"{r}{CLOSE}" for r in out or ["(?s:.*)"]]


def _parameter(tool: str, key: str, schema: dict, rule: str) -> list[str]:
    if not _KEY.fullmatch(key):
        raise _refuse(tool, key, "a key the tag cannot hold")
    head = json.dumps(f"<parameter={key}>\n")
    typ = _first_type(schema)
    if typ is None and not ("enum" in schema or "const" in schema):
        raise _refuse(tool, key, "no type (the tags read an untyped value as a string)")
    if typ in (None, "string"):
        regexes = _string_regexes(tool, key, schema)
        lexeme = " & ".join(f"/{r}/" for r in regexes) + r" & ~/(?s:.*<\/parameter>.+)/"
        return [f'{rule}: {head} {rule}_v "\\n"', f"{rule}_v[lazy]: {lexeme}"]
    json_schema = {**schema, "x-guidance": JSON_OPTIONS}
    return [f'{rule}: {head} {rule}_v "\\n</parameter>\\n"',
            f"{rule}_v: %json {json.dumps(json_schema, ensure_ascii=False)}"]


def xml_call_rules(tools: list[Tool]) -> tuple[str, list[str]]:
    """``call`` (one ``<function=…>`` element to any of ``tools``) and its rules."""
    alternatives, rules = [], []
    for i, tool in enumerate(tools):
        if tool.custom:
            raise invalid(f"tool_choice forces a call, and '{tool.name}' is a custom tool: this model's parameter "
                          "tags cannot carry its input grammar yet", param="tool_choice", code="unsupported_value")
        if not _NAME.fullmatch(tool.name):
            raise invalid(f"tool_choice forces a call to '{tool.name}', a name this model's call tags cannot hold",
                          param="tool_choice", code="unsupported_value")
        schema = tool.parameters or {"type": "object"}
        props = schema.get("properties") or {}
        missing = set(schema.get("required") or []) - set(props)
        if missing:
            raise _refuse(tool.name, sorted(missing)[0], "required but not among its properties")
        parts = []
        for j, (key, sub) in enumerate(props.items()):
            rules += _parameter(tool.name, key, sub if isinstance(sub, dict) else {}, f"f{i}_p{j}")
            parts.append(f"f{i}_p{j}" + ("" if key in (schema.get("required") or []) else "?"))
        alternatives.append(f"f{i}")
        rules.append(f"f{i}: {json.dumps(f'<function={tool.name}>' + chr(10))} {' '.join(parts)} \"</function>\"")
    return "call: " + " | ".join(alternatives), rules
