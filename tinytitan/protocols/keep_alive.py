"""Ollama's ``keep_alive``, as its server reads it (api/types.go, ``Duration``): a JSON number is seconds (negative:
forever); a string is read by Go's ``time.ParseDuration``, and one it cannot read is Ollama's 400 in Go's words.

Rules (Go's time/format.go):
- ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+``: one or more numbers, each with a unit (``ns``, ``us``, ``µs``, ``μs``,
  ``ms``, ``s``, ``m``, ``h``), ``"1h30m"``, ``"1.5h"``, ``".5s"``, ``"-5m"``; ``"0"`` (signed or not) alone needs
  no unit. Nothing else: no spaces, no ``"5"`` (``"-1"`` as a string is refused: as a JSON number it is seconds).
- Errors: ``time: invalid duration "x"``, ``time: missing unit in duration "5"``, ``time: unknown unit " minutes"
  in duration "5 minutes"``; a total past 2⁶³-1 nanoseconds is an invalid duration. Go's quoting writes each byte
  of a character that is not printable ASCII as ``\\xNN``.
"""

from __future__ import annotations

from ..errors import invalid

UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
         "m": 60_000_000_000, "h": 3_600_000_000_000}
_DIGITS = "0123456789"
_LIMIT = 1 << 63


class DurationError(ValueError):
    """Go's error text for a string ParseDuration refuses."""


def quote(s: str) -> str:
    """Go's time.quote: double quotes, ``"`` and ``\\`` escaped, other bytes outside printable ASCII as ``\\xNN``."""
    out = []
    for c in s:
        if c >= "\x80" or c < " ":
            out.extend(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass"))
        else:
            out.append("\\" + c if c in '"\\' else c)
    return '"' + "".join(out) + '"'


def _number(s: str, at: int) -> int:
    while at < len(s) and s[at] in _DIGITS:
        at += 1
    return at


def parse(text: str) -> int:
    """``text`` in nanoseconds, as Go's ``time.ParseDuration`` reads it; DurationError in Go's words otherwise."""
    invalid = DurationError("time: invalid duration " + quote(text))
    s, neg = text, False
    if s[:1] in ("-", "+"):
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        if s[0] != "." and s[0] not in _DIGITS:
            raise invalid
        end = _number(s, 0)
        whole, pre = int(s[:end] or "0"), end > 0
        if whole > _LIMIT:  # (Go's leadingInt overflows)
            raise invalid
        s, fraction, scale, post = s[end:], 0, 1.0, False
        if s[:1] == ".":
            end = _number(s, 1)
            digits, s, post = s[1:end], s[end:], end > 1
            for d in digits:  # digits past what 2⁶³ holds are read and dropped, as Go's leadingFraction does
                if fraction > (_LIMIT - 1) // 10 or fraction * 10 + int(d) > _LIMIT:
                    break
                fraction, scale = fraction * 10 + int(d), scale * 10
        if not pre and not post:
            raise invalid
        end = 0
        while end < len(s) and s[end] != "." and s[end] not in _DIGITS:
            end += 1
        if end == 0:
            raise DurationError("time: missing unit in duration " + quote(text))
        unit = UNITS.get(s[:end])
        if unit is None:
            raise DurationError(f"time: unknown unit {quote(s[:end])} in duration {quote(text)}")
        s = s[end:]
        if whole > _LIMIT // unit:
            raise invalid
        value = whole * unit + (int(fraction * (unit / scale)) if fraction else 0)
        total += value
        if value > _LIMIT or total > _LIMIT:
            raise invalid
    if not neg and total > _LIMIT - 1:
        raise invalid
    return -total if neg else total


def check(value) -> None:
    """The ``keep_alive`` hook: a string Go cannot read is refused in Go's words (``time: invalid duration "abc"``),
    as Ollama answers it; a number is any number of seconds. Nothing else reads it: the model stays resident."""
    if isinstance(value, str):
        try:
            parse(value)
        except DurationError as exc:
            raise invalid(str(exc), param="keep_alive", code="invalid_value") from None


def lets_go(keep_alive) -> bool:
    """``keep_alive`` 0 (``0``, ``"0"``, ``"0s"``, ``"0m0s"``, ``"-0s"``: any duration Ollama reads as zero
    nanoseconds): the client lets the model go (``ollama stop``, Open WebUI's unload), so its load request loads
    nothing. A negative number is forever; a string Go cannot read lets nothing go."""
    if isinstance(keep_alive, bool):
        return False
    if isinstance(keep_alive, (int, float)):
        return 0 <= keep_alive < 1e-9  # (under a nanosecond: Go's conversion to whole nanoseconds gives 0)
    try:
        return isinstance(keep_alive, str) and parse(keep_alive) == 0
    except DurationError:
        return False
