"""Forced calls in the tag markups: arguments as one tag a value, each value verbatim.

    Qwen3-Coder (``xml``)                     GLM (``kv``)
    <tool_call>                               <tool_call>NAME
    <function=NAME>                           <arg_key>KEY</arg_key>
    <parameter=KEY>                           <arg_value>VALUE</arg_value>
    VALUE                                     </tool_call>
    </parameter>
    </function>
    </tool_call>

Rules (each family's parser reads a value as the text up to the first closing tag — for Qwen3-Coder less
one newline on each side — a string-typed parameter as that text, any other as the JSON value it spells):
- A string parameter's value is raw text matching its schema (length bounds, enum / const, pattern, the date
  and time formats); it never contains the closing tag. Where the tag is one token of the vocabulary (GLM's
  tags usually are), that token ends the value; where it is text, the value's rule is lazy with the tag
  inside its regex, so the value ends at the first closing tag and nowhere else.
- Any other typed parameter's value is JSON matching its schema, spelt as the templates write it (``tojson``).
- Parameters come in the schema's order; the required ones always, the others optionally.
- What the markup cannot carry is refused by name: a parameter without a type (Qwen3-Coder reads one as a
  string: an enum or const of strings is served there), a string with other constraints (a format without a
  pattern of ours), custom tools, names or keys the tags cannot hold.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ...chat_request import Tool
from ...errors import invalid
from .compile import FORMAT_PATTERNS, SPACED, JsonLayout, custom_tool_refused, json_rule

@dataclass(frozen=True)
class Tags:
    head: str  # the call's opening, {name} filled in
    key: str  # a parameter's opening, up to its value, {key} filled in ({string}: "true" for a string value)
    close: str  # a value's closing tag
    layout: str  # the newline before the closing tag the parser drops ("" where it reads the value verbatim)
    after: str  # what follows a parameter
    end: str  # the call's closing
    untyped_is_string: bool  # how the parser reads a parameter the schema gives no type
    markers: tuple[str, ...] = ()  # tags that are written as one token where the vocabulary has them
    json_layout: JsonLayout = SPACED  # a JSON value's spelling (the templates write one with ``tojson``)


TAGS = {
    "xml": Tags("<function={name}>\n", "<parameter={key}>\n", "</parameter>", "\n", "\n", "</function>", True),
    "kv": Tags("{name}\n", "<arg_key>{key}</arg_key>\n<arg_value>", "</arg_value>", "", "\n", "", False,
               ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")),
}
_STRING_KEYS = {"type", "minLength", "maxLength", "enum", "const", "pattern", "format", "title", "description",
                "examples", "default", "$comment"}
_NAME = re.compile(r"[^\s<>{}]+")
_KEY = re.compile(r"[^\s<>]+")


def _literal(text: str) -> str:
    """``text`` as a regex matching exactly it (lark slashes escaped)."""
    escaped = re.sub(r"([\\.^$|?*+()\[\]{}/\-])", r"\\\1", text)
    return escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _spell(text: str, tags: Tags, vocab: dict) -> str:
    """``text`` as a lark sequence: its tags that are one token of the vocabulary as that token (``<[id]>``),
    the rest as literals."""
    pattern = "|".join(re.escape(m) for m in tags.markers if m in vocab)
    pieces = re.split(f"({pattern})", text) if pattern else [text]
    return " ".join(f"<[{vocab[p]}]>" if p in vocab and p in tags.markers else json.dumps(p) for p in pieces if p)


def _refuse(tool: str, key: str, why: str):
    return invalid(f"tool_choice forces a call to '{tool}', whose parameter '{key}' cannot be enforced in this "
                   f"model's argument tags: {why}", param="tool_choice", code="unsupported_schema")


def _first_type(schema: dict) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t


def _string_regexes(tool: str, key: str, schema: dict, close: str) -> list[str]:
    """... ``close``: the closing tag as a regex, ending each (empty where the tag is one token)."""
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
    return [f"{r}{close}" for r in out or ["(?s:.*)"]]


def _parameter(tags: Tags, vocab: dict, tool: str, key: str, schema: dict, rule: str) -> list[str]:
    if not _KEY.fullmatch(key):
        raise _refuse(tool, key, "a key the tag cannot hold")
    typ = _first_type(schema)
    head = _spell(tags.key.format(key=key, string="true" if typ in (None, "string") else "false"), tags, vocab)
    if typ is None and not (tags.untyped_is_string and ("enum" in schema or "const" in schema)):
        raise _refuse(tool, key, "no type (the tags read an untyped value as "
                      f"{'a string' if tags.untyped_is_string else 'a literal'})")
    close = _spell(tags.layout + tags.close + tags.after, tags, vocab)
    if typ not in (None, "string"):
        return [f"{rule}: {head} {rule}_v {close}",
                f"{rule}_v: {json_rule(schema, tags.json_layout)}"]
    nowhere = f"~/(?s:.*{_literal(tags.close)}.*)/"  # the value never holds its closing tag
    if tags.close in vocab and tags.close in tags.markers:  # the tag is a token: the value stops where it comes
        regexes = _string_regexes(tool, key, schema, _literal(tags.layout))
        token = rule.upper() + "_V"  # (an intersection is a token's)
        return [f"{rule}: {head} {token} {close}", f"{token}: /" + "/ & /".join(regexes) + f"/ & {nowhere}"]
    # the tag is text: a lazy value whose regex ends with the tag ends at the first one
    regexes = _string_regexes(tool, key, schema, _literal(tags.layout + tags.close))
    lexeme = " & ".join(f"/{r}/" for r in regexes) + f" & ~/(?s:.*{_literal(tags.close)}.+)/"
    return [f"{rule}: {head} {rule}_v {json.dumps(tags.after)}", f"{rule}_v[lazy]: {lexeme}"]


def _any_parameters(tags: Tags, vocab: dict, rule: str) -> list[str]:
    """``rule``: any parameters, any keys, any text values (a tool that is not strict, under ``auto``)."""
    before, after_key = tags.key.replace("{string}", "true").split("{key}")  # any value is text
    key = rule.upper() + "_KEY"
    head = " ".join(p for p in (_spell(before, tags, vocab), key, _spell(after_key, tags, vocab)) if p)
    close = _spell(tags.layout + tags.close + tags.after, tags, vocab)
    nowhere = f"~/(?s:.*{_literal(tags.close)}.*)/"
    rules = [f"{rule}: {rule}_one*", key + r': /[^\s<>"]+/']  # (a quote ends a key: <parameter name="k">)
    if tags.close in vocab and tags.close in tags.markers:
        value = rule.upper() + "_V"
        return rules + [f"{rule}_one: {head} {value} {close}", f"{value}: /(?s:.*)/ & {nowhere}"]
    lazy = f"/(?s:.*){_literal(tags.layout + tags.close)}/ & ~/(?s:.*{_literal(tags.close)}.+)/"
    return rules + [f"{rule}_one: {head} {rule}_v {json.dumps(tags.after)}", f"{rule}_v[lazy]: {lazy}"]


def tag_call_rules(body: "str | Tags", tools: list[Tool], vocab: dict, loose: bool = False) -> tuple[str, list[str]]:
    """``call`` (one call in ``body``'s tags — a ``Tags`` row, or the name of one in ``TAGS`` — to any of
    ``tools``) and its rules. ``loose``: a tool that is not strict takes any parameters."""
    tags = TAGS[body] if isinstance(body, str) else body
    alternatives, rules = [], []
    for i, tool in enumerate(tools):
        if tool.custom:
            raise custom_tool_refused(tool.name, "argument tags")
        if not _NAME.fullmatch(tool.name):
            raise invalid(f"tool_choice forces a call to '{tool.name}', a name this model's call tags cannot hold",
                          param="tool_choice", code="unsupported_value")
        if loose and not tool.strict:
            alternatives.append(f"f{i}")
            end = f" {_spell(tags.end, tags, vocab)}" if tags.end else ""
            rules += [f"f{i}: {_spell(tags.head.format(name=tool.name), tags, vocab)} f{i}_any{end}",
                      *_any_parameters(tags, vocab, f"f{i}_any")]
            continue
        schema = tool.parameters or {"type": "object"}
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        missing = set(required) - set(props)
        if missing:
            raise _refuse(tool.name, sorted(missing)[0], "required but not among its properties")
        parts = []
        for j, (key, sub) in enumerate(props.items()):
            rules += _parameter(tags, vocab, tool.name, key, sub if isinstance(sub, dict) else {}, f"f{i}_p{j}")
            parts.append(f"f{i}_p{j}" + ("" if key in required else "?"))
        alternatives.append(f"f{i}")
        end = f" {_spell(tags.end, tags, vocab)}" if tags.end else ""
        rules.append(f"f{i}: {_spell(tags.head.format(name=tool.name), tags, vocab)} {' '.join(parts)}{end}")
    return "call: " + " | ".join(alternatives), rules
