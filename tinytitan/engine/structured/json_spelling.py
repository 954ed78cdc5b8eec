"""How JSON spells one character inside a string, with one spelling each: the short escapes (``\\n``,
``\\"``…), ``\\u00XX`` for the other control characters, everything else as itself. The characters spelt with
a backslash are ``SPECIAL``."""

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
