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
there and fail at the ``n``. So:

Rules:
- A terminal is one lexeme unless it may match the empty text, or it may hold a character spelt with a
  backslash while a terminal that may follow it (its FOLLOW set over the grammar's rules) may begin with
  one. The end of the input is followed by the string's closing quote, which no escaped lexeme holds.
- Every other terminal is rewritten character by character (``escaped.py``), as before.
- A regex format (one pattern) is one terminal followed by the end.
"""

from __future__ import annotations

from .json_spelling import SPECIAL, spelling

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
        safe, escapes = [], []
        for a, b in sorted(node[1]):
            lo = a
            for c in range(a, min(b, 0x5C) + 1):  # the special characters all lie at or below backslash
                if c in SPECIAL:
                    if lo < c:
                        safe.append((lo, c - 1))
                    escapes.append("".join(f"\\x{{{ord(ch):x}}}" for ch in spelling(c)))
                    lo = c + 1
            if lo <= b:
                safe.append((lo, b))
        parts = (["[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in safe) + "]"]
                 if safe else []) + escapes
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


def follow_sets(rules: list[tuple[str, list[str]]], terminals: set[str], empty: set[str],
                start_rule: str) -> dict[str, set[str]]:
    """FOLLOW of each symbol: ``rules`` (origin, expansion) over rule and terminal names; ``empty`` the
    terminals that may match the empty text. The start rule is followed by ``END``."""
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
    follow: dict[str, set[str]] = {s: set() for s in symbols}
    follow[start_rule].add(END)
    changed = True
    while changed:
        changed = False
        for origin, expansion in rules:
            for i, s in enumerate(expansion):
                after: set[str] = set()
                for t in expansion[i + 1:]:
                    after |= first[t]
                    if t not in nullable:
                        break
                else:
                    after |= follow[origin]
                if not after <= follow[s]:
                    follow[s] |= after
                    changed = True
    return follow
