"""Which terminals of a client's grammar stay one lexeme once rewritten for a JSON string (``escaped.py``).

A client writes its grammar for llguidance's lexer (OpenAI's custom tools run on it): each terminal is one
lexeme, read greedily. Written inside the call's JSON string, a terminal kept whole is one regex over the
escaped spelling, which the matcher follows as one automaton: cheap, and never ambiguous. Split into
one-character lexemes, a pattern that can end at almost any character (``.*a``, ``(.*a){3}``) makes every
character a choice point, and the matcher's item limit stops the turn.

One thing the escaping adds: a character the raw text spells as one byte, the escaped text spells with a
backslash (``\\n``, ``\\"``, ``\\t``…). Where a terminal that may hold such a character is followed by one
that may begin with such a character (``/.+/`` then ``LF``), the raw lexer ends the first at the newline, but
the escaped first could go on at the backslash (``\\t``), and the lexer, which never backs up, would hold it
there and fail at the ``n``. The lexer also reads every lexeme that may begin at one point as one
automaton, greedily: a one-lexeme terminal beside one written per character wins that race against its
one-character lexemes, and dies where the other would have gone on. So:

Rules:
- A regex terminal is split (written character by character, ``escaped.py``) where it may hold a character
  spelt with a backslash and some terminal that may begin where it begins (itself among them) may be followed
  (its FOLLOW set over the grammar's rules) by one that may begin with such a character; where it may match
  the empty text and is not ``x*`` (which is the optional lexeme ``x+``); and, to a fixpoint, where it may
  begin where a split terminal begins or may follow one (``split_terminals``). Every other regex terminal is
  one lexeme. The end of the input is followed by the string's closing quote, which no escaped lexeme holds.
- A terminal of one text (a string, or a regex such as ``/\\n/``) is one string lexeme unless split: then
  each of its characters is one. A terminal of one character is never split (it is its own per-character
  form), and a split terminal's characters are never merged into a longer lexeme.
- A regex format (one pattern) is one terminal followed by the end.
- Where split terminals meet, the per-character form is not greedy: it may admit a text llguidance's lexer
  would refuse on the raw grammar. A differential fuzzer (llguidance on ~5,000 random raw grammars and texts
  against this rewrite on the escaped texts) found none it refuses that the raw grammar admits.
"""

from __future__ import annotations

from .json_spelling import SPECIAL, class_of, partition, spelling

END = "$end"


def _special(ranges) -> bool:
    return any(a <= c <= b for a, b in ranges for c in SPECIAL)


def may_hold_special(node) -> bool:
    """May a text this regex tree matches hold a character spelt with a backslash?"""
    kind = node[0]
    if kind == "chars":
        return _special(node[1])
    if kind in ("seq", "alt"):
        return any(may_hold_special(n) for n in node[1])
    if kind == "rep":
        return (node[2] is None or node[2] > 0) and may_hold_special(node[3])
    return False


def fixed_text(node) -> str | None:
    """The one text this regex tree matches, where it matches only one (a string written as a regex)."""
    if node[0] == "chars":
        return chr(node[1][0][0]) if len(node[1]) == 1 and node[1][0][0] == node[1][0][1] else None
    if node[0] != "seq":
        return None
    parts = [fixed_text(n) for n in node[1]]
    return None if None in parts else "".join(parts)


def start(node) -> tuple[bool, bool]:
    """(may a matched text begin with a character spelt with a backslash, may it be empty)"""
    kind = node[0]
    if kind == "chars":
        return _special(node[1]), False
    if kind == "seq":
        special = False
        for item in node[1]:
            first, empty = start(item)
            special |= first
            if not empty:
                return special, False
        return special, True
    if kind == "alt":
        firsts = [start(n) for n in node[1]]
        return any(f for f, _ in firsts), any(e for _, e in firsts) or not firsts
    if kind == "rep":
        if node[2] == 0:
            return False, True
        first, empty = start(node[3])
        return first, empty or node[1] == 0
    return False, True  # an anchor


def regex(node) -> str:
    """The regex (llguidance's syntax, inside ``/…/``) matching exactly the escaped spellings of the tree's texts."""
    kind = node[0]
    if kind == "chars":
        safe, special = partition(node[1])
        parts = ([class_of(safe)] if safe else []) + ["".join(f"\\x{{{ord(ch):x}}}" for ch in spelling(c))
                                                      for c in special]
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
    if kind == "seq":
        return "".join(regex(n) for n in node[1])
    if kind == "alt":
        return "(?:" + "|".join(regex(n) for n in node[1]) + ")"
    if kind == "rep":
        lo, hi, sub = node[1], node[2], node[3]
        count = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
        if count is None:
            count = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}" if hi != lo else f"{{{lo}}}"
        return f"(?:{regex(sub)}){count}"
    return ""  # an anchor at the very start or end: a terminal is matched whole


def _first_nullable(rules, terminals, empty):
    symbols = {o for o, _ in rules} | terminals
    nullable = set(empty)
    first: dict[str, set[str]] = {s: ({s} if s in terminals else set()) for s in symbols}
    changed = True
    while changed:  # nullable rules, and the terminals each rule may begin with
        changed = False
        for origin, expansion in rules:
            if origin not in nullable and all(s in nullable for s in expansion):
                nullable.add(origin)
                changed = True
            for s in expansion:
                if not first[s] <= first[origin]:
                    first[origin] |= first[s]
                    changed = True
                if s not in nullable:
                    break
    return symbols, first, nullable


def _after(expansion, first, nullable, tail: set[str]) -> set[str]:
    """The terminals that may begin ``expansion`` (``tail`` where all of it may be empty)."""
    out: set[str] = set()
    for t in expansion:
        out |= first[t]
        if t not in nullable:
            return out
    return out | tail


def follow_sets(rules: list[tuple[str, list[str]]], terminals: set[str], empty: set[str],
                start_rule: str) -> dict[str, set[str]]:
    """FOLLOW of each symbol: ``rules`` (origin, expansion) over rule and terminal names; ``empty`` the
    terminals that may match the empty text. The start rule is followed by ``END``."""
    return _follow(rules, *_first_nullable(rules, terminals, empty), start_rule)


def _follow(rules, symbols, first, nullable, start_rule: str) -> dict[str, set[str]]:
    follow: dict[str, set[str]] = {s: set() for s in symbols}
    follow[start_rule].add(END)
    changed = True
    while changed:
        changed = False
        for origin, expansion in rules:
            for i, s in enumerate(expansion):
                after = _after(expansion[i + 1:], first, nullable, follow[origin])
                if not after <= follow[s]:
                    follow[s] |= after
                    changed = True
    return follow


def split_terminals(rules: list[tuple[str, list[str]]], terminals: set[str], empty: set[str], start_rule: str,
                    special: set[str], first_special: set[str], forced: set[str], single: set[str]) -> set[str]:
    """The terminals written character by character, each character a lexeme. ``special``: those that may
    hold a character spelt with a backslash; ``forced``: those that cannot be one lexeme (empty, not ``x*``);
    ``single``: those of one character at most (a lexeme of one character is its own per-character form).

    The lexer reads every terminal that may begin at one point as one automaton, greedily. So a terminal A
    is split where it may hold a special character and any terminal that may begin where A begins (A itself
    among them) may be followed by one beginning with a special character: A's escaped lexeme could go on at
    that backslash past where the other one ends. And a lexeme of several characters beside a split terminal
    (at the same point, or after it, where the split one may go on) would win the greedy race against its
    one-character lexemes: it is split too — a string as much as a regex (``// @exec:`` beside any text)."""
    symbols, first, nullable = _first_nullable(rules, terminals, empty)
    follow = _follow(rules, symbols, first, nullable, start_rule)
    # where lexing may begin: the input's start, and after each terminal (at most what may follow it, over every
    # rule it ends a path of: the parser admits the union of its items' next terminals)
    points = [_after([start_rule], first, nullable, {END})] + [follow[t] for t in terminals]
    split = set(forced)
    for point in points:
        if special & point and any(follow.get(b, set()) & first_special for b in point):
            split |= (special & point) - single
    longer = terminals - single
    changed = True
    while changed:
        changed = False
        for group in [p for p in points if p & split] + [follow[b] for b in split]:
            if not (group & longer) <= split:
                split |= group & longer
                changed = True
    return split
