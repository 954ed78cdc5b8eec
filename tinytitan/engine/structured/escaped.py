"""A client's grammar (Lark or regex) for text that is written inside a JSON string.

A custom tool's input reaches the client as text, but the model writes it inside its call's JSON
arguments (``{"input": "…"}``), where a newline is ``\\n`` and a quote ``\\"``. This module rewrites the
grammar so that it matches exactly the JSON-escaped form of the texts the original matches (each character
has one spelling: the short escapes, ``\\u00XX`` for other control characters, everything else as itself).

Rules:
- Lark grammars are read with the ``lark`` library (its ``%import common…`` included) and compiled to plain
  rules and terminals; each terminal's pattern (a string, or a regex read by ``regex_subset``, our parser of
  the subset that can be rewritten) is rewritten to its escaped spelling: a string stays one lexeme; a regex
  stays one lexeme (one regex over the spelling) where ``lexemes.py`` finds that safe, and is otherwise
  written character by character, each character a lexeme of its own. Rules keep their shape; names get a
  prefix so several grammars can sit in one.
- What cannot be rewritten faithfully is refused by name (ApiError): ``%ignore``, case-insensitive strings,
  and every regex construct ``regex_subset`` refuses (look-arounds, backreferences, atomic groups,
  possessive quantifiers, word boundaries, anchors inside a pattern, flags other than ``s``) — never widened.
- A grammar is rewritten once per source (an LRU): a client that sends the same grammar every turn pays once.
- ``\\d``, ``\\w`` and ``\\s`` and their complements are Python's Unicode classes, as ``re`` reads them
  (``regex_subset``).
"""

from __future__ import annotations

import functools
import json

from ...chat_request import Grammar
from ...errors import invalid
from . import lexemes, regex_subset
from .json_spelling import SPECIAL, class_of, partition, spelling
from .regex_subset import BadRegex, Unsupported

MAX_EXPANDED_REPEAT = 64  # {m,n} bounds are written out; more is refused


def _lit(text: str) -> str:
    """A Lark string literal for ``text`` (an escaped spelling: matched byte for byte)."""
    return json.dumps(text, ensure_ascii=True)


def _set(ranges: list[tuple[int, int]]) -> str:
    """A character set → a Lark expression: one character of its plain members (a one-character
    lexeme, so it never swallows the backslash an escape or another terminal starts with), or the escape of
    a special member."""
    safe, special = partition(ranges)
    parts = ([f"/{class_of(safe)}/"] if safe else []) + [_lit(spelling(c)) for c in special]
    if not parts:
        raise Unsupported("an empty character set")
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def _expr(node) -> str:
    """A regex tree (``regex_subset.parse``) → a Lark rule expression over the escaped spelling."""
    kind = node[0]
    if kind == "chars":
        ranges = node[1]
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return _lit(spelling(ranges[0][0]))
        return _set(list(ranges))
    if kind == "alt":
        return "(" + " | ".join(_expr(branch) or '""' for branch in node[1]) + ")"
    if kind == "rep":
        lo, hi, sub = node[1], node[2], node[3]
        body = "(" + (_expr(sub) or '""') + ")"
        if max(lo, hi or 0) > MAX_EXPANDED_REPEAT:
            raise Unsupported(f"repeat counts over {MAX_EXPANDED_REPEAT}")
        if hi is None:
            return " ".join([body] * max(lo - 1, 0) + [body + ("*" if lo == 0 else "+")])
        return " ".join([body] * lo + [body + "?"] * (hi - lo)) or '""'
    if kind == "seq":  # (each literal character a lexeme of its own: merged, a run of them would win the lexer's
        # greedy race against another terminal's one-character lexemes at the same point, lexemes.py)
        return " ".join(part for part in (_expr(item) for item in node[1]) if part)
    return ""  # an anchor at the very start or end: a terminal is matched whole, it says nothing more


@functools.lru_cache(maxsize=256)
def _tree(pattern: str, flags: str = ""):
    if set(flags) - {"s"}:
        raise Unsupported(f"regex flags {''.join(sorted(set(flags) - {'s'}))}")
    return regex_subset.parse(pattern, "s" in flags)


def _terminal(tree, name: str, split: bool) -> tuple[str, list[str]]:
    """A terminal's regex tree → (the rule expression standing for it, the lines defining it). ``split``: it
    is written character by character (``lexemes.py`` says when); else one lexeme ``name`` (a pattern that
    may be empty, ``x*``, is the optional lexeme ``x+``)."""
    whole = None if split else _whole(tree)
    if whole is not None:
        _expr(whole)  # (refused where the split form would be: the same grammar is refused either way)
        return name + ("?" if whole is not tree else ""), [f"{name}: /{lexemes.regex(whole)}/"]
    return _expr(tree) or '""', []


def _whole(tree):
    """The tree a terminal's one lexeme is written from (``x+`` for ``x*``, made optional), or None where a
    pattern that may be empty has no such form."""
    whole = tree
    if lexemes.start(tree)[1] and tree[0] == "rep" and tree[1] == 0 and not lexemes.start(tree[3])[1]:
        whole = ("rep", 1, tree[2], tree[3])
    return None if lexemes.start(whole)[1] else whole


ANY_TEXT = r"(?s:.*)"  # the pattern of a custom tool whose format is text: any text


def escaped_lark_rules(grammar: Grammar, prefix: str) -> tuple[list[str], str]:
    """llguidance Lark rules matching the JSON-escaped texts of ``grammar`` → (rules, start rule name).
    ApiError names ``grammar.where`` when it cannot be rewritten."""
    try:
        if grammar.kind == "regex":
            return list(_regex_rules(grammar.source, prefix)), f"{prefix}_s"
        return _lark_rules(grammar.source, prefix)
    except BadRegex as exc:
        raise invalid(f"The grammar at '{grammar.where}' is not a valid regular expression: {exc}",
                      param=grammar.where, code="invalid_grammar") from None
    except Unsupported as exc:
        raise invalid(f"The grammar at '{grammar.where}' cannot be enforced inside the model's tool call: {exc} "
                      "are not supported", param=grammar.where, code="unsupported_grammar") from None
    except Exception as exc:  # the lark library's own errors: a grammar that does not parse
        raise invalid(f"The grammar at '{grammar.where}' is not a valid Lark grammar: {exc}".strip(),
                      param=grammar.where, code="invalid_grammar") from None


@functools.lru_cache(maxsize=256)  # a text tool's any-text, and a client's regex, sent every turn: rewritten once
def _regex_rules(source: str, prefix: str) -> tuple[str, ...]:
    """A regex format: one terminal, followed by the end of the input (start rule ``{prefix}_s``)."""
    expr, lines = _terminal(_tree(source), f"{prefix.upper()}_T0", split=False)
    return (f"{prefix}_s: {expr}", *lines)


def _lark_rules(source: str, prefix: str) -> tuple[list[str], str]:
    rules, start = _lark_rules_cached(source, prefix)
    return list(rules), start


@functools.lru_cache(maxsize=256)  # a client sends its grammar every turn (Codex's apply_patch): rewritten once
def _lark_rules_cached(source: str, prefix: str) -> tuple[tuple[str, ...], str]:
    from lark import Lark
    from lark.lexer import Lexer, PatternStr

    class Unused(Lexer):  # lark's own lexers refuse zero-width terminals, which llguidance's regexes may be
        def __init__(self, conf):
            pass

        def lex(self, *args):
            raise NotImplementedError

    # the grammar compiled by lark's public API (its rules and terminals, %import common… resolved); no text
    # is ever parsed with it, so its lexer is a stub
    parsed = Lark(source, start="start", parser="earley", lexer=Unused)
    terminals, rules, ignore = parsed.terminals, parsed.rules, parsed.ignore_tokens
    if ignore:
        raise Unsupported("%ignore directives")
    names: dict[str, str] = {}

    def name(symbol) -> str:  # terminals become rules too (over one lexeme, or one per character)
        if symbol.name not in names:
            names[symbol.name] = f"{prefix}_r{len(names)}"
        return names[symbol.name]

    by_origin: dict[str, list[str]] = {}
    for rule in rules:
        body = " ".join(name(s) for s in rule.expansion)
        by_origin.setdefault(name(rule.origin), []).append(body)
    out = [f"{origin}: " + " | ".join(bodies) for origin, bodies in by_origin.items()]
    known = {t.name: t for t in terminals if t.name in names}
    trees, texts = {}, {}  # each terminal's regex tree, or its one text (a string, or a regex of one text)
    for raw, term in known.items():
        pattern = term.pattern
        if isinstance(pattern, PatternStr):
            if "i" in pattern.flags:
                raise Unsupported("case-insensitive strings")
            texts[raw] = pattern.value
        else:
            tree = _tree(pattern.value, "".join(pattern.flags))
            text = lexemes.fixed_text(tree)
            if text is None:
                trees[raw] = tree
            else:
                texts[raw] = text
    starts = {raw: lexemes.start(tree) for raw, tree in trees.items()}
    starts.update({raw: (bool(text) and ord(text[0]) in SPECIAL, not text) for raw, text in texts.items()})
    split = lexemes.split_terminals(
        [(r.origin.name, [x.name for x in r.expansion]) for r in rules], set(known),
        {raw for raw, (_, blank) in starts.items() if blank}, "start",
        special={raw for raw, tree in trees.items() if lexemes.may_hold_special(tree)}
        | {raw for raw, text in texts.items() if any(ord(ch) in SPECIAL for ch in text)},
        first_special={raw for raw, (begins, _) in starts.items() if begins},
        forced={raw for raw, tree in trees.items() if _whole(tree) is None},
        single={raw for raw, text in texts.items() if len(text) <= 1})
    for raw in known:
        renamed = names[raw]
        if raw in texts:  # one string lexeme, or one per character
            spelt = [spelling(ord(ch)) for ch in texts[raw]]
            out.append(f"{renamed}: " + (" ".join(_lit(s) for s in spelt) if raw in split else _lit("".join(spelt))))
            continue
        expr, lines = _terminal(trees[raw], f"{prefix.upper()}_T{len(out)}", raw in split)
        out += [f"{renamed}: {expr}", *lines]
    start = names.get("start")
    if start is None:
        raise Unsupported("a grammar without a 'start' rule")
    return tuple(out), start
