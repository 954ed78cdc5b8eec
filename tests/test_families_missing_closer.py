"""A call block whose closer the model left out, straight followed by the next call's opener
(``<tool_call>{…}\\n<tool_call>{…}</tool_call>``, as small models write two calls): two calls, no text —
not a stray ``<tool_call>`` between them (Qwen), nor the second call lost as text (Qwen3-Coder). An opener
after text that follows a call is still that text (the model writing about its format)."""

from __future__ import annotations

import pytest

import family_checks as fc
import family_fixtures as ff
from tinytitan.chat_request import ChatRequest

ROME, PARIS = {"city": "Rome"}, {"city": "Paris"}
JSON = '{{"name": "get_weather", "arguments": {{"city": "{}"}}}}'
XML = "<function=get_weather>\n<parameter=city>\n{}\n</parameter>\n</function>"
CASES = [
    ("qwen", f"<tool_call>\n{JSON.format('Rome')}\n<tool_call>\n{JSON.format('Paris')}\n</tool_call>"),
    ("qwen", f"<tool_call>\n{JSON.format('Rome')}<tool_call>{JSON.format('Paris')}</tool_call>"),
    ("qwen3_coder", f"<tool_call>\n{XML.format('Rome')}\n<tool_call>\n{XML.format('Paris')}\n</tool_call>"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("missing-closer")


@pytest.mark.parametrize("family,raw", CASES)
@pytest.mark.parametrize("split", ["whole", "chars"])
def test_the_next_opener_ends_a_block_missing_its_closer(family, raw, split):
    events = ff.parsed(family, [raw] if split == "whole" else list(raw))
    assert (ff.text_of(events), ff.arguments_of(events)) == ("", ['{"city": "Rome"}', '{"city": "Paris"}'])


@pytest.mark.parametrize("family,raw", CASES)
def test_token_by_token_through_the_engine(family, raw, root):
    events = ff.generate(ff.backend(family, root, [raw]), ChatRequest("m", fc.USER, fc.TOOLS))
    assert fc.calls_of(events) == [("get_weather", ROME), ("get_weather", PARIS)], events
    assert ff.text_of(events) == "" and events[-1].reason == "tool_calls"


def test_an_opener_after_text_is_still_that_text():
    raw = f"<tool_call>\n{JSON.format('Rome')}\nI used <tool_call> tags.\n</tool_call>"
    for pieces in ([raw], list(raw)):
        events = ff.parsed("qwen", pieces)
        assert (ff.text_of(events), ff.arguments_of(events)) == ("I used <tool_call> tags.", ['{"city": "Rome"}'])
