"""The bracket count's string scan is linear: a body whose strings never close (escaped quotes, a trailing
backslash, an escaped newline) is no quadratic scan holding the GIL for minutes before the parse refuses it."""

from __future__ import annotations

import time

import pytest

from tinytitan.speclang.json_text import MAX_CONTAINERS, too_many_containers
from stall_helpers import health_while_posting

MODEL = "tinytitan-scripted"


@pytest.mark.parametrize("text", [
    '"' + '\\"' * 20_000 + "[" * (MAX_CONTAINERS + 1),            # a string that never closes
    '"' + '\\"' * 20_000 + "\\\n" + "[" * (MAX_CONTAINERS + 1),   # …stopped by an escaped newline
    "[" * (MAX_CONTAINERS // 2) + '"' + '\\"' * 20_000 + "\\" + "[" * MAX_CONTAINERS,  # …a trailing backslash
], ids=["unclosed", "escaped-newline", "trailing-backslash"])
def test_unclosed_strings_are_scanned_once(text):
    t = time.monotonic()
    too_many_containers(text)
    assert time.monotonic() - t < 2


@pytest.mark.parametrize("text,many", [
    ('["a\\\\", ' + "[]," * MAX_CONTAINERS + "0]", True),          # "a\\" closes before the brackets
    ('["\\"", ' + "[]," * MAX_CONTAINERS + "0]", True),            # "\"" too
    ('["\\"' + "[]," * MAX_CONTAINERS + '"]', False),              # brackets inside a string
], ids=["backslash-pair", "escaped-quote", "inside"])
def test_strings_with_escapes_end_where_json_ends_them(text, many):
    assert too_many_containers(text) is many


async def test_an_unclosed_string_body_does_not_stall_others(serve):
    s = await serve(["ok"])
    body = ('{"model": "%s", "x": "' % MODEL + '\\"' * 60_000 + "[" * (MAX_CONTAINERS + 1)).encode()
    worst, r = await health_while_posting(s, body)
    assert worst < 3, f"/health took {worst:.1f} s while the body was read"
    assert r.status_code in (400, 413), r.text[:300]
