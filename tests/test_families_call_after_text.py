"""A second call written after text inside the same call block, decoded token by token (the fixture tokenizer's
pieces, as the engine runs it), is still a call, and so is one whose opening arrives in the same piece as the
text before it."""

from __future__ import annotations

import pytest

import family_fixtures as ff
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message, Tool

WEATHER = Tool("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}})
INVOKE = '<invoke name="get_weather">\n<parameter name="city">{}</parameter>\n</invoke>\n'
RAW = {
    "qwen": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\nNow the other one.\n'
            '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    "minimax_m2": "</think>\n<minimax:tool_call>\n" + INVOKE.format("Rome") + "Now the other one.\n"
                  + INVOKE.format("Oslo") + "</minimax:tool_call>",
}


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("rev23-after-text")


@pytest.mark.parametrize("family", list(RAW))
def test_a_call_after_text_in_the_same_block_token_by_token(root, family):
    req = ChatRequest("m", (Message("user", "Weather in Rome and Oslo?"),), (WEATHER,), reasoning=False)
    events = ff.generate(ff.backend(family, root, [RAW[family]]), req)
    text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
    assert [e.name for e in events if isinstance(e, ev.ToolCallStarted)] == ["get_weather"] * 2, text
    assert text == "Now the other one."


QWEN_BLOCK = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n%s\n</tool_call>'
SECOND = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'


@pytest.mark.parametrize("after,text,calls", [
    ('He said "so. {a} ok\n' + SECOND, 'He said "so. {a} ok', 2),  # an odd quote, a brace, then a call
    ("See {x} and {y}.", "See {x} and {y}.", 1),
])
@pytest.mark.parametrize("split", ["whole", "chars"])
def test_qwen_text_then_call_in_one_block(after, text, calls, split):
    from tinytitan.engine.families import FAMILIES

    raw = QWEN_BLOCK % after
    p = FAMILIES["qwen"].parser(False, {}, {"get_weather": WEATHER.parameters})
    out = []
    for piece in ([raw] if split == "whole" else list(raw)):
        out += p.feed(piece)[0]
    out += p.finish()
    assert "".join(e.text for e in out if isinstance(e, ev.TextDelta)) == text
    assert len([e for e in out if isinstance(e, ev.ToolCallDone)]) == calls


def test_qwen_text_ending_in_what_could_open_a_call_is_kept():
    from tinytitan.engine.families import FAMILIES

    p = FAMILIES["qwen"].parser(False, {}, {"get_weather": WEATHER.parameters})
    out = []
    for piece in ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n', "Done ", '{"na',
                  "\n</tool_call>"]:
        out += p.feed(piece)[0]
    out += p.finish()
    assert "".join(e.text for e in out if isinstance(e, ev.TextDelta)) == 'Done {"na'


@pytest.mark.parametrize("split", ["whole", "text and call in one piece", "chars"])
def test_minimax_call_after_text_in_one_piece(split):
    from tinytitan.engine.families import FAMILIES

    raw = RAW["minimax_m2"]
    first, rest = raw.split("Now", 1)
    pieces = {"whole": [raw], "text and call in one piece": [first, "Now" + rest[:30], rest[30:]],
              "chars": list(raw)}[split]
    p = FAMILIES["minimax_m2"].parser(True, {}, {"get_weather": WEATHER.parameters})
    out = []
    for piece in pieces:
        out += p.feed(piece)[0]
    out += p.finish()
    assert [e.name for e in out if isinstance(e, ev.ToolCallStarted)] == ["get_weather"] * 2
    assert "".join(e.text for e in out if isinstance(e, ev.TextDelta)) == "Now the other one."
