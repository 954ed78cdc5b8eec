"""``keep_alive`` as Ollama reads it (api/types.go, ``Duration.UnmarshalJSON``): a number is seconds (negative:
forever); a string goes through Go's ``time.ParseDuration``, and one it cannot read is a 400 in Go's own words —
never accepted silently."""

from __future__ import annotations

import httpx
import pytest

from tinytitan.protocols.keep_alive import DurationError, lets_go, parse

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]
ROUTES = [("/api/chat", {"messages": USER}), ("/api/generate", {"prompt": "hi"})]


@pytest.mark.parametrize("path,body", ROUTES)
@pytest.mark.parametrize("value", [300, 0, -1, 1.5, "5m", "1h30m", "1.5h", ".5s", "-1m", "+10s", "0", "-0", "300ms",
                                   "2µs", "2us"])
async def test_every_keep_alive_ollama_takes_is_taken(serve, path, body, value):
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url(path), json={"model": MODEL, "stream": False, "keep_alive": value, **body})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path,body", [*ROUTES, ("/api/chat", {})])   # (the last: a load request)
@pytest.mark.parametrize("value,error", [
    ("abc", 'time: invalid duration "abc"'),
    ("5 minutes", 'time: unknown unit " minutes" in duration "5 minutes"'),
    ("-1", 'time: missing unit in duration "-1"'),   # (-1 is forever as a number, not as a string)
    ("300", 'time: missing unit in duration "300"'),
    ("", 'time: invalid duration ""'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    (" 5m", 'time: invalid duration " 5m"'),
    ("9999999999h", 'time: invalid duration "9999999999h"'),
])
async def test_a_keep_alive_go_cannot_read_is_refused_in_gos_words(serve, path, body, value, error):
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url(path), json={"model": MODEL, "stream": False, "keep_alive": value, **body})
    assert r.status_code == 400 and r.json() == {"error": error}


def test_durations_read_as_go_reads_them():
    assert parse("1h30m") == 5_400_000_000_000 and parse("1.5h") == 5_400_000_000_000
    assert parse("-5m") == -300_000_000_000 and parse(".5s") == 500_000_000 and parse("7ns") == 7
    assert parse("1µs") == parse("1μs") == parse("1us") == 1000
    assert parse("9223372036854775807ns") == 2 ** 63 - 1 and parse("-9223372036854775808ns") == -2 ** 63
    for text, error in [(".s", 'time: invalid duration ".s"'), ("1..5s", 'time: missing unit in duration "1..5s"'),
                        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
                        ("5µx", r'time: unknown unit "\xc2\xb5x" in duration "5\xc2\xb5x"'),
                        ("٣s", r'time: invalid duration "\xd9\xa3s"'), ('a"b', r'time: invalid duration "a\"b"')]:
        with pytest.raises(DurationError) as caught:
            parse(text)
        assert str(caught.value) == error


def test_under_a_nanosecond_is_zero_and_a_negative_number_is_forever():
    assert lets_go(1e-10) and lets_go("0.1ns") and not lets_go(-1) and not lets_go(1e-9)
