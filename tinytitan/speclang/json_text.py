"""JSON text as a strict parser reads it: a request body (containers bounded, NaN / Infinity and numbers past a
double's range refused naming their field, lone surrogates replaced) and a call's arguments a model wrote
(``strict_loads``), so that nothing ``json.dumps`` would write back as bare ``NaN`` reaches a client."""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any

from ..errors import ApiError, invalid


def request_body(text: str) -> Any:
    """A request body's text → its value (``json.JSONDecodeError`` / ``RecursionError`` for text that is not
    JSON or nests past the parser, which the caller words)."""
    if too_many_containers(text):  # before the parse, which would hold the GIL throughout
        raise ApiError("request_too_large", f"The request body has more than {MAX_CONTAINERS} JSON arrays and objects")
    # NaN / Infinity: not JSON, and past any range check; so is a number past a double's range (1e400, which
    # float() makes inf); an integer too long for int(): both found below, naming their field
    longs: list[str] = []  # noted as they are parsed: a regex over a 30 MB body holds the GIL ~0.2 s
    body = json.loads(text, parse_constant=_not_json, parse_int=functools.partial(_parse_int, longs),
                      parse_float=functools.partial(_parse_float, longs))
    if longs:
        _refuse_long_numbers(body)
    # JavaScript clients cut strings by UTF-16 units and JSON.stringify writes a half-cut pair as a lone
    # \ud83d escape: valid JSON, but no text a tokenizer can encode or a file can store.
    return without_lone_surrogates(body) if re.search(r"\\u[dD][89a-fA-F]", text) else body


# json.loads holds the GIL for its whole parse (a worker thread leaves the event loop stalled all the same), and
# every container it makes is one more for the cyclic collector to walk while the body lives: a 60 MB body of
# ``[],[],…`` (20 million lists) held the GIL ~15 s. A million containers parse in ~0.3 s; no client's request
# comes near (a long agent conversation with hundreds of tools holds some tens of thousands).
MAX_CONTAINERS = 1_000_000
# a string that never closes (invalid JSON: the parse refuses it) runs to the end of the text, so that no quote is
# the start of a second scan over the same text (quadratic: minutes of the GIL for a body of 1 MB)
_STRING_OR_OPENER = re.compile(r'"[^"\\]*(?:\\.?[^"\\]*)*(?:"|\Z)|[\[{]', re.DOTALL)


def too_many_containers(text: str) -> bool:
    """More than MAX_CONTAINERS arrays and objects in ``text``: counted from its brackets (a C-speed bound), and
    where brackets inside strings could account for the excess, counted outside strings (a loop that lets other
    threads run between matches, stopping at the limit)."""
    if text.count("[") + text.count("{") <= MAX_CONTAINERS:
        return False
    n = 0
    for m in _STRING_OR_OPENER.finditer(text):
        if text[m.start()] != '"':
            n += 1
            if n > MAX_CONTAINERS:
                return True
    return False


def _not_json(name: str) -> Any:
    raise invalid(f"The request body is not valid JSON: {name} is not a JSON number", code="invalid_json")


_MAX_DIGITS = 4300  # Python's own limit on int() of a string (sys.get_int_max_str_digits)


class _LongNumber(str):
    """An integer literal of more digits than int() takes, kept as its text until its field is named."""


def _parse_int(longs: list[str], text: str) -> Any:
    if len(text.lstrip("-")) <= _MAX_DIGITS:
        return int(text)
    longs.append(text)
    return _LongNumber(text)


class _HugeNumber(str):
    """A number literal past a double's range (``1e400``: float() makes it inf), kept as its text until its
    field is named."""


def _parse_float(longs: list[str], text: str) -> Any:
    value = float(text)
    if not math.isinf(value):
        return value
    longs.append(text)
    return _HugeNumber(text)


def _refuse_long_numbers(value: Any, path: str = "") -> None:
    if isinstance(value, _HugeNumber):
        where = path or "the body"
        raise invalid(f"Invalid value for '{where}': {value} is past the range of a JSON number (a double)",
                      param=path or None, code="invalid_value")
    if isinstance(value, _LongNumber):
        where = path or "the body"
        raise invalid(f"Invalid value for '{where}': a number of {len(value.lstrip('-'))} digits; at most "
                      f"{_MAX_DIGITS} are accepted", param=path or None, code="invalid_value")
    if isinstance(value, list):
        for i, v in enumerate(value):
            _refuse_long_numbers(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            _refuse_long_numbers(v, f"{path}.{k}" if path else str(k))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # (as _parse_float finds it)
        raise ValueError(f"{text} is past the range of a JSON number")
    return value


def strict_loads(text: str) -> Any:
    """``json.loads`` of text a model wrote (a call's arguments), as a strict JSON parser reads it: NaN,
    Infinity and a number past a double's range (1e400) are ValueError, never a float that ``json.dumps`` then
    writes back as bare ``NaN`` / ``Infinity`` — a body no client's parser reads."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins real pairs: any surrogate left is alone


def without_lone_surrogates(value: Any) -> Any:
    """Each lone surrogate becomes U+FFFD, as a UTF-8 decoder would make of it."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    return value
