"""A parser of the regular-expression subset a grammar can be rewritten from (``escaped.py``), in Python's
own syntax (the syntax of Lark terminals and of OpenAI's regex custom-tool formats).

A pattern becomes a small tree of plain tuples:

    ("chars", ((lo, hi), …))   one character from these code-point ranges (a literal is one range)
    ("seq", (node, …))         one after another
    ("alt", (node, …))         any one of them
    ("rep", lo, hi, node)      lo to hi repeats (hi None: no bound)
    ("start",) / ("end",)      an anchor at the very start / end of the text

Rules:
- What this parser reads, it reads exactly: a construct whose meaning cannot be kept by a grammar over the
  whole text is refused by name (``Unsupported``), never read as something wider. Refused: look-arounds,
  backreferences, conditionals, atomic groups, possessive quantifiers, word boundaries (``\\b``, ``\\B``),
  anchors anywhere but the very start or end (and under a repeat), inline flags other than ``s``.
- ``\\d``, ``\\w`` and ``\\s`` (and ``\\D``, ``\\W``, ``\\S``, and sets holding any of them, negated or not)
  are Python's Unicode classes for a str pattern, as ``re`` reads them: ``\\d`` a decimal digit of any script
  (``str.isdecimal``), ``\\w`` a letter, digit or number of any script or ``_`` (``str.isalnum``), ``\\s`` any
  white space (``str.isspace``); the complements are taken of those, so ``\\W`` never admits ``é``.
- Lazy quantifiers (``*?``) are the greedy ones: over a whole text both admit the same texts.
- A pattern that is not a regex at all raises ``BadRegex``.
"""

from __future__ import annotations

import functools
import unicodedata

MAX_CHAR = 0x10FFFF
# the predicates Python's ``re`` tests a character with for \d, \w, \s in a str pattern (sre's Unicode classes)
CLASSES = {"d": str.isdecimal, "w": lambda ch: ch.isalnum() or ch == "_", "s": str.isspace}
SIMPLE_ESCAPES = {"a": 0x07, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class Unsupported(ValueError):
    """A construct a grammar cannot keep: the message names it (a plural noun phrase)."""


class BadRegex(ValueError):
    """Not a valid regular expression."""


@functools.lru_cache(maxsize=None)
def unicode_class(letter: str) -> tuple[tuple[int, int], ...]:
    """The code-point ranges of ``\\d``, ``\\w`` or ``\\s`` as ``re`` reads them (computed once: a scan of every
    code point, a few tenths of a second)."""
    test, out, start = CLASSES[letter], [], None
    for c in range(MAX_CHAR + 1):
        if test(chr(c)):
            start = c if start is None else start
        elif start is not None:
            out.append((start, c - 1))
            start = None
    if start is not None:
        out.append((start, MAX_CHAR))
    return tuple(out)


def complement(ranges) -> tuple[tuple[int, int], ...]:
    out, lo = [], 0
    for a, b in sorted(ranges):
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= MAX_CHAR:
        out.append((lo, MAX_CHAR))
    return tuple(out)


def parse(pattern: str, dotall: bool = False):
    """``pattern`` → its tree (see the module doc); Unsupported / BadRegex as the rules say."""
    parser = _Parser(pattern, dotall)
    tree = parser.alternation()
    if parser.i < len(pattern):
        raise BadRegex(f"unbalanced parenthesis at position {parser.i}")
    _check_anchors(tree, True, True)
    return tree


class _Parser:
    def __init__(self, text: str, dotall: bool):
        self.text, self.i, self.dotall = text, 0, dotall

    def peek(self, n: int = 1) -> str:
        return self.text[self.i:self.i + n]

    def take(self) -> str:
        if self.i >= len(self.text):
            raise BadRegex("the pattern ends inside a construct")
        ch = self.text[self.i]
        self.i += 1
        return ch

    def alternation(self):
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", tuple(branches))

    def sequence(self):
        items = []
        while self.i < len(self.text) and self.peek() not in "|)":
            atom = self.atom()
            if atom is None:  # a comment or a global flag
                continue
            items.append(self.quantified(atom))
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def quantified(self, atom):
        bounds = self.quantifier()
        if bounds is None:
            return atom
        if atom[0] in ("start", "end"):
            raise Unsupported("anchors under a repeat")
        if self.peek() == "+":
            raise Unsupported("possessive quantifiers")
        if self.peek() == "?":
            self.i += 1  # lazy: over a whole text, the same texts as greedy
        if self.quantifier(look=True) is not None:
            raise BadRegex(f"multiple repeat at position {self.i}")
        return ("rep", bounds[0], bounds[1], atom)

    def quantifier(self, look: bool = False):
        ch = self.peek()
        if ch in ("*", "+", "?") and ch:
            if not look:
                self.i += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
        if ch != "{":
            return None
        close = self.text.find("}", self.i)
        inner = self.text[self.i + 1:close] if close > 0 else None
        if inner is None or inner == "" or not all(c.isdigit() or c == "," for c in inner) or inner.count(",") > 1:
            return None  # Python reads such a brace as a literal
        lo_text, _, hi_text = inner.partition(",")
        lo = int(lo_text) if lo_text else 0
        hi = (int(hi_text) if hi_text else None) if "," in inner else lo
        if hi is not None and hi < lo:
            raise BadRegex(f"min repeat greater than max repeat at position {self.i}")
        if not look:
            self.i = close + 1
        return lo, hi

    def atom(self):
        ch = self.take()
        if ch == "(":
            return self.group()
        if ch == "[":
            return ("chars", self.char_class())
        if ch == ".":
            return ("chars", ((0, MAX_CHAR),) if self.dotall else complement([(0x0A, 0x0A)]))
        if ch == "^":
            return ("start",)
        if ch == "$":
            return ("end",)
        if ch in "*+?":
            raise BadRegex(f"nothing to repeat at position {self.i - 1}")
        if ch == "{" and self._brace_is_quantifier():
            raise BadRegex(f"nothing to repeat at position {self.i - 1}")
        if ch == "\\":
            return self.escape(in_class=False)
        return ("chars", ((ord(ch), ord(ch)),))

    def _brace_is_quantifier(self) -> bool:
        self.i -= 1
        try:
            return self.quantifier(look=True) is not None
        finally:
            self.i += 1

    def group(self):
        if self.peek() != "?":
            return self.group_body()
        self.i += 1
        ch = self.take()
        if ch == ":":
            return self.group_body()
        if ch == "P" and self.peek() == "<" or ch == "<" and self.peek() not in ("=", "!"):
            if ch == "P":
                self.i += 1
            end = self.text.find(">", self.i)
            if end < 0 or not self.text[self.i:end].isidentifier():
                raise BadRegex(f"bad group name at position {self.i}")
            self.i = end + 1
            return self.group_body()
        if ch == "P" and self.peek() == "=":
            raise Unsupported("backreferences")
        if ch in "=!" or ch == "<":
            raise Unsupported("look-arounds")
        if ch == ">":
            raise Unsupported("atomic groups")
        if ch == "(":
            raise Unsupported("conditionals")
        if ch == "#":
            end = self.text.find(")", self.i)
            if end < 0:
                raise BadRegex("missing ), unterminated comment")
            self.i = end + 1
            return None
        return self.flags(ch)

    def flags(self, first: str):
        """``(?s)`` at the very start, ``(?s:…)`` / ``(?-s:…)`` anywhere: only the s flag."""
        start = self.i - 1
        self.i -= 1
        add: set[str] = set()
        remove: set[str] = set()
        target = add
        while True:
            ch = self.take()
            if ch == "-":
                target = remove
            elif ch.isalpha():
                target.add(ch)
            elif ch in ":)":
                break
            else:
                raise BadRegex(f"unknown extension ?{first} at position {start}")
        if (add | remove) - {"s"}:
            raise Unsupported("inline regex flags other than s")
        if ch == ")":
            if remove:
                raise BadRegex("missing :, a flag can be turned off only in a group")
            if start != 2:
                raise BadRegex("global flags not at the start of the expression")
            self.dotall = self.dotall or "s" in add
            return None
        outer = self.dotall
        self.dotall = (outer or "s" in add) and "s" not in remove
        try:
            return self.group_body()
        finally:
            self.dotall = outer

    def group_body(self):
        inner = self.alternation()
        if self.peek() != ")":
            raise BadRegex("missing ), unterminated subpattern")
        self.i += 1
        return inner

    def escape(self, in_class: bool):
        ch = self.take()
        low = ch.lower()
        if low in CLASSES:
            ranges = unicode_class(low)
            return ("chars", ranges if ch.islower() else complement(ranges))
        if ch == "b" and in_class:
            return ("chars", ((0x08, 0x08),))
        if ch in "bB":
            raise Unsupported("word boundaries (\\b, \\B)")
        if ch == "A" and not in_class:
            return ("start",)
        if ch in "Zz" and not in_class:
            return ("end",)
        if ch in SIMPLE_ESCAPES:
            return self._char(SIMPLE_ESCAPES[ch])
        if ch in HEX_ESCAPES:
            digits = self.text[self.i:self.i + HEX_ESCAPES[ch]]
            if len(digits) != HEX_ESCAPES[ch] or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise BadRegex(f"incomplete escape \\{ch}{digits}")
            self.i += len(digits)
            value = int(digits, 16)
            if value > MAX_CHAR:
                raise BadRegex(f"bad escape \\{ch}{digits}")
            return self._char(value)
        if ch == "N" and self.peek() == "{":
            end = self.text.find("}", self.i)
            if end < 0:
                raise BadRegex("missing }, unterminated name")
            try:
                value = ord(unicodedata.lookup(self.text[self.i + 1:end]))
            except KeyError:
                raise BadRegex(f"undefined character name {self.text[self.i + 1:end]!r}") from None
            self.i = end + 1
            return self._char(value)
        if ch.isdigit():
            if ch == "0":  # \0, \0o, \0oo: octal
                digits = ch
                while len(digits) < 3 and self.peek() and self.peek() in "01234567":
                    digits += self.take()
                return self._char(int(digits, 8))
            more = self.text[self.i:self.i + 2]
            if ch in "01234567" and len(more) == 2 and all(c in "01234567" for c in more):
                self.i += 2
                if int(ch + more, 8) > 0o377:
                    raise BadRegex(f"octal escape value \\{ch}{more} outside of range 0-0o377")
                return self._char(int(ch + more, 8))
            if in_class:
                raise BadRegex(f"bad escape \\{ch}")
            raise Unsupported("backreferences")
        if ch.isascii() and ch.isalnum():
            raise BadRegex(f"bad escape \\{ch}")
        return self._char(ord(ch))

    @staticmethod
    def _char(c: int):
        return ("chars", ((c, c),))

    def char_class(self) -> tuple[tuple[int, int], ...]:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.i >= len(self.text):
                raise BadRegex("unterminated character set")
            ch = self.take()
            if ch == "]" and not first:
                break
            first = False
            lo = self.class_item(ch)
            if self.peek() == "-" and self.peek(2)[1:] not in ("]", ""):  # a range; "-" before "]" is itself
                self.i += 1
                hi = self.class_item(self.take())
                if len(lo) != 1 or len(hi) != 1 or lo[0][0] != lo[0][1] or hi[0][0] != hi[0][1]:
                    raise BadRegex("bad character range")
                if hi[0][0] < lo[0][0]:
                    raise BadRegex("bad character range")
                ranges.append((lo[0][0], hi[0][0]))
            else:
                ranges += lo
        if not ranges and not negate:
            raise BadRegex("an empty character set")
        return complement(ranges) if negate else tuple(sorted(ranges))

    def class_item(self, ch: str) -> tuple[tuple[int, int], ...]:
        if ch == "\\":
            node = self.escape(in_class=True)
            if node[0] != "chars":
                raise BadRegex("bad escape in a character set")
            return node[1]
        return ((ord(ch), ord(ch)),)


def _check_anchors(node, at_start: bool, at_end: bool) -> None:
    """Anchors only where nothing can come before (``start``) or after (``end``) them."""
    kind = node[0]
    if kind == "start" and not at_start or kind == "end" and not at_end:
        raise Unsupported("anchors inside the pattern (^, $, \\A, \\Z anywhere but its very start or end)")
    if kind == "alt":
        for branch in node[1]:
            _check_anchors(branch, at_start, at_end)
    elif kind == "seq":
        items = node[1]
        for i, item in enumerate(items):
            before = all(x[0] == "start" for x in items[:i])
            after = all(x[0] == "end" for x in items[i + 1:])
            _check_anchors(item, at_start and before, at_end and after)
    elif kind == "rep":
        _check_anchors(node[3], False, False)
