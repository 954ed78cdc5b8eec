"""How JSON spells one character inside a string, with one spelling each: the short escapes (``\\n``,
``\\"``…), ``\\u00XX`` for the other control characters, everything else as itself. The characters spelt with
a backslash are ``SPECIAL``; ``partition`` splits a character set into the rest, a range of plain characters
each, and those."""

from __future__ import annotations

SHORT = {0x22: '"', 0x5C: "\\", 0x0A: "n", 0x0D: "r", 0x09: "t", 0x08: "b", 0x0C: "f"}
SPECIAL = frozenset(SHORT) | frozenset(range(0x20))


def spelling(c: int) -> str:
    """How JSON spells the character ``c`` inside a string."""
    if c in SHORT:
        return "\\" + SHORT[c]
    if c < 0x20:
        return f"\\u00{c:02x}"
    return chr(c)


def partition(ranges) -> tuple[list[tuple[int, int]], list[int]]:
    """A set of code-point ranges → (its plain ranges, its special characters in order)."""
    safe, special = [], []
    for a, b in sorted(ranges):
        lo = a
        for c in range(a, min(b, 0x5C) + 1):  # the special characters all lie at or below backslash
            if c in SPECIAL:
                if lo < c:
                    safe.append((lo, c - 1))
                special.append(c)
                lo = c + 1
        if lo <= b:
            safe.append((lo, b))
    return safe, special


def class_of(safe: list[tuple[int, int]]) -> str:
    """Plain ranges as a regex character class (``[\\x{61}-\\x{7a}…]``), every code point written by number."""
    return "[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in safe) + "]"
