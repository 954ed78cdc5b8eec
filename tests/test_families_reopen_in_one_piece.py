"""The second opener that ends a block which has read no call is decided on what the block has read
up to that opener, whatever the pieces: text after a call that names the opener, in the same piece as the call,
stays the block's text (the closer is not leaked as text), and Gemma's ```tool_code written after prose naming it
is a call a token at a time too (its closer "```" is the start of its opener: wait for the rest)."""

from __future__ import annotations

import pytest

import family_fixtures as ff

TOOLS = ff.WEATHER_TOOL
A = '{"name": "get_weather", "arguments": {"city": "Rome"}}'


def parse(family, pieces):
    events = ff.parsed(family, pieces, TOOLS)
    return ff.text_of(events), ff.arguments_of(events)


@pytest.mark.parametrize("family,raw,text,calls", [
    ("qwen", f"<tool_call>\n{A}\nI used <tool_call> tags.\n</tool_call>", "I used <tool_call> tags.",
     ['{"city": "Rome"}']),
    ("gemma", "Use ```tool_code fences.\n```tool_code\nget_weather(city='Rome')\n```", "Use ```tool_code fences.\n",
     ['{"city": "Rome"}']),
    ("gemma", "```tool_code\nget_weather(city='Rome')\n```\nDone.", "Done.", ['{"city": "Rome"}']),
    # a second fence straight after a call's: its "```" closes the first block, as a token at a time
    ("gemma", "```tool_code\nget_weather(city='Rome')\n```tool_code\nget_weather(city='Paris')\n```",
     "tool_code\nget_weather(city='Paris')\n```", ['{"city": "Rome"}']),
])
@pytest.mark.parametrize("split", ["whole", "chars"])
def test_whole_and_token_by_token_agree(family, raw, text, calls, split):
    assert parse(family, [raw] if split == "whole" else list(raw)) == (text, calls)
