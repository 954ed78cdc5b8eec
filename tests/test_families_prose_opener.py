"""A model that names its call opener in prose before a real call (``Use `<tool_call>` tags.`` then the call):
the first opener began a block that swallowed the second, and the real call came back as text. While a block has
read no call, a second opener ends it as text and begins the block; inside a call's quoted value it is the
value's."""

from __future__ import annotations

import pytest

import family_fixtures as ff

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


def parse(pieces) -> tuple[str, list[str], list[str]]:
    events = ff.parsed("qwen", pieces, {"get_weather": {"type": "object"}})
    return ff.text_of(events), ff.calls_of(events), ["".join(ff.arguments_of(events))]


@pytest.mark.parametrize("split", [False, True])
def test_an_opener_named_in_prose_before_a_call_leaves_the_call_a_call(split):
    raw = "Use `<tool_call>` tags.\n" + CALL
    text, calls, args = parse(list(raw) if split else [raw])
    assert (text, calls) == ("Use `<tool_call>` tags.\n", ["get_weather"])
    assert args == ['{"city": "Rome"}']


@pytest.mark.parametrize("split", [False, True])
def test_an_opener_inside_a_calls_value_is_the_values(split):
    raw = 'A call: <tool_call>\n{"name": "get_weather", "arguments": {"city": "<tool_call>"}}\n</tool_call>'
    text, calls, args = parse(list(raw) if split else [raw])
    assert (text.strip(), calls, args) == ("A call:", ["get_weather"], ['{"city": "<tool_call>"}'])
