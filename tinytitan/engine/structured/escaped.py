"""A client's grammar (Lark or regex) for text that is written inside a JSON string.

A custom tool's input reaches the client as text, but the model writes it inside its call's JSON
arguments (``{"input": "…"}``), where a newline is ``\\n`` and a quote ``\\"``. This module rewrites the
grammar so that it matches exactly the JSON-escaped form of the texts the original matches (each character
has one spelling: the short escapes, ``\\u00XX`` for other control characters, everything else as itself).

Rules:
- Lark grammars are read with the ``lark`` library (its ``%import common…`` included) and compiled to plain
  rules and terminals; each terminal's pattern (a string, or a regex read with Python's own regex parser) is
  rewritten character by character. Rules keep their shape; names get a prefix so several grammars can sit
  in one.
- What cannot be rewritten faithfully is refused by name (ApiError): ``%ignore``, regex flags other than
  ``s``, look-arounds and backreferences.
- ``\\d``, ``\\w`` and ``\\s`` are read as their ASCII classes (a subset of Python's Unicode ones: the
  grammar admits fewer texts, never more).
"""

from __future__ import annotations

import json
import re
import re._constants as C  # noqa: N812 (the regex parser's opcodes)
import re._parser as P  # noqa: N812

from ...chat_request import Grammar
from ...errors import invalid

MAX_CHAR = 0x10FFFF
SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0C: "\\f"}
SPECIAL = set(SHORT) | set(range(0x20))
CATEGORIES = {
    C.CATEGORY_DIGIT: [(0x30, 0x39)],
    C.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    C.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
}
NOT_CATEGORIES = {C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT, C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
                  C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE}
MAX_EXPANDED_REPEAT = 64  # {m,n} bounds are written out; more is refused


class Unsupported(ValueError):
    pass


def spelling(c: int) -> str:
    """How JSON spells one character inside a string (one spelling each)."""
    if c in SHORT:
        return "\\" + {0x22: '"', 0x5C: "\\", 0x0A: "n", 0x0D: "r", 0x09: "t", 0x08: "b", 0x0C: "f"}[c]
    if c < 0x20:
        return f"\\u00{c:02x}"
    return chr(c)


def _lit(text: str) -> str:
    """A Lark string literal for ``text`` (an escaped spelling: matched byte for byte)."""
    return json.dumps(text, ensure_ascii=True)


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, lo = [], 0
    for a, b in sorted(ranges):
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= MAX_CHAR:
        out.append((lo, MAX_CHAR))
    return out


def _set(ranges: list[tuple[int, int]]) -> str:
    """A character set → a Lark expression: one character of its plain members (a one-character
    lexeme, so it never swallows the backslash an escape or another terminal starts with), or the escape of
    a special member."""
    safe, escapes = [], []
    for a, b in sorted(ranges):
        lo = a
        for c in range(a, min(b, 0x5C) + 1):  # the special characters all lie at or below backslash
            if c in SPECIAL:
                if lo < c:
                    safe.append((lo, c - 1))
                escapes.append(_lit(spelling(c)))
                lo = c + 1
        if lo <= b:
            safe.append((lo, b))
    parts = []
    if safe:
        parts.append("/[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in safe) + "]/")
    parts += escapes
    if not parts:
        raise Unsupported("an empty character set")
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def _in_ranges(items) -> list[tuple[int, int]]:
    negate, ranges = False, []
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            ranges.append((av, av))
        elif op is C.RANGE:
            ranges.append(av)
        elif op is C.CATEGORY and av in CATEGORIES:
            ranges += CATEGORIES[av]
        elif op is C.CATEGORY and av in NOT_CATEGORIES:
            ranges += _complement(CATEGORIES[NOT_CATEGORIES[av]])
        else:
            raise Unsupported(f"the character class item {op}")
    return _complement(ranges) if negate else ranges


def _seq(items, dotall: bool) -> str:
    """A parsed regex → a Lark rule expression over the escaped spelling."""
    out: list[str] = []
    text: list[str] = []  # consecutive literal characters, written as one string

    def flush():
        if text:
            out.append(_lit("".join(text)))
            text.clear()

    for op, av in items:
        if op is C.LITERAL:
            text.append(spelling(av))
            continue
        flush()
        if op is C.NOT_LITERAL:
            out.append(_set(_complement([(av, av)])))
        elif op is C.ANY:
            out.append(_set([(0, MAX_CHAR)] if dotall else _complement([(0x0A, 0x0A)])))
        elif op is C.IN:
            out.append(_set(_in_ranges(av)))
        elif op is C.BRANCH:
            out.append("(" + " | ".join(_seq(branch, dotall) or '""' for branch in av[1]) + ")")
        elif op is C.SUBPATTERN:
            group, add, remove, sub = av
            if add & ~re.DOTALL or remove:
                raise Unsupported("inline regex flags other than s")
            out.append("(" + (_seq(sub, dotall or bool(add & re.DOTALL)) or '""') + ")")
        elif op is C.ATOMIC_GROUP:
            out.append("(" + (_seq(av, dotall) or '""') + ")")
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            body = "(" + (_seq(sub, dotall) or '""') + ")"
            if hi is C.MAXREPEAT:
                if lo > MAX_EXPANDED_REPEAT:
                    raise Unsupported(f"repeat counts over {MAX_EXPANDED_REPEAT}")
                out.append(" ".join([body] * max(lo - 1, 0) + [body + ("*" if lo == 0 else "+")]))
            else:
                if hi > MAX_EXPANDED_REPEAT:
                    raise Unsupported(f"repeat counts over {MAX_EXPANDED_REPEAT}")
                out.append(" ".join([body] * lo + [body + "?"] * (hi - lo)) or '""')
        elif op is C.AT:
            continue  # a terminal is matched whole: anchors say nothing more
        else:
            raise Unsupported("look-arounds, backreferences and conditionals" if op in (
                C.ASSERT, C.ASSERT_NOT, C.GROUPREF, C.GROUPREF_EXISTS) else f"the regex construct {op}")
    flush()
    return " ".join(out)


def escaped_expression(pattern: str, flags: str = "") -> str:
    if set(flags) - {"s"}:
        raise Unsupported(f"regex flags {''.join(sorted(set(flags) - {'s'}))}")
    return _seq(P.parse(pattern), "s" in flags) or '""'


ANY_TEXT = escaped_expression(r"(?s:.*)")  # a custom tool whose format is text: any text


def escaped_lark_rules(grammar: Grammar, prefix: str) -> tuple[list[str], str]:
    """llguidance Lark rules matching the JSON-escaped texts of ``grammar`` → (rules, start rule name).
    ApiError names ``grammar.where`` when it cannot be rewritten."""
    try:
        if grammar.kind == "regex":
            return [f"{prefix}_s: {escaped_expression(grammar.source)}"], f"{prefix}_s"
        return _lark_rules(grammar.source, prefix)
    except Unsupported as exc:
        raise invalid(f"The grammar at '{grammar.where}' cannot be enforced inside the model's tool call: {exc} "
                      "are not supported", param=grammar.where, code="unsupported_grammar") from None
    except Exception as exc:  # the lark library's own errors: a grammar that does not parse
        raise invalid(f"The grammar at '{grammar.where}' is not a valid Lark grammar: {exc}".strip(),
                      param=grammar.where, code="invalid_grammar") from None


def _lark_rules(source: str, prefix: str) -> tuple[list[str], str]:
    from lark.lexer import PatternStr
    from lark.load_grammar import load_grammar

    built, _ = load_grammar(source, "<grammar>", [], False)
    terminals, rules, ignore = built.compile(["start"], "*")
    if ignore:
        raise Unsupported("%ignore directives")
    names: dict[str, str] = {}

    def name(symbol) -> str:  # terminals become rules too: their characters are lexemes of their own
        if symbol.name not in names:
            names[symbol.name] = f"{prefix}_r{len(names)}"
        return names[symbol.name]

    by_origin: dict[str, list[str]] = {}
    for rule in rules:
        body = " ".join(name(s) for s in rule.expansion)
        by_origin.setdefault(name(rule.origin), []).append(body)
    out = [f"{origin}: " + " | ".join(bodies) for origin, bodies in by_origin.items()]
    known = {t.name: t for t in terminals}
    for raw, renamed in list(names.items()):
        term = known.get(raw)
        if term is None:
            continue
        pattern = term.pattern
        if isinstance(pattern, PatternStr):
            if "i" in pattern.flags:
                raise Unsupported("case-insensitive strings")
            expr = _lit("".join(spelling(ord(ch)) for ch in pattern.value))
        else:
            expr = escaped_expression(pattern.value, "".join(pattern.flags))
        out.append(f"{renamed}: {expr}")
    start = names.get("start")
    if start is None:
        raise Unsupported("a grammar without a 'start' rule")
    return out, start
