"""Text a model writes after a complete call, inside the call's block, comes back as text with its spaces and
punctuation, however the pieces split it (it lost them token by token); a call after such text is still a call,
and on Gemma 4 the text is no longer dropped."""

from __future__ import annotations

import pytest

import family_fixtures as ff
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message, Tool
from tinytitan.engine.families import FAMILIES


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("after-text")


AFTER = "I checked it, see [the notes]; done."
TEXT_AFTER_CALL = {
    "qwen": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n' + AFTER + "\n</tool_call>",
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
                   + AFTER + "\n</tool_call>",
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"} ' + AFTER,
    "minimax_m2": '</think>\n<minimax:tool_call>\n<invoke name="get_weather">\n'
                  '<parameter name="city">Rome</parameter>\n</invoke>\n' + AFTER + "\n</minimax:tool_call>",
    "deepseek_v3": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Rome"}'
                   "<｜tool▁call▁end｜>" + AFTER + "<｜tool▁calls▁end｜>",
    "deepseek_r1": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
                   '{"city": "Rome"}\n```<｜tool▁call▁end｜>' + AFTER + "<｜tool▁calls▁end｜>",
}
WEATHER = Tool("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}})


@pytest.mark.parametrize("family", list(TEXT_AFTER_CALL))
def test_text_after_a_call_keeps_its_spaces(root, family):
    """Text a model writes after a complete call inside its block comes back as text: token by token (the
    fixture tokenizer's own pieces), its spaces and punctuation are kept, as when it arrives whole."""
    req = ChatRequest("m", (Message("user", "Weather in Rome?"),), (WEATHER,), reasoning=False)
    events = ff.generate(ff.backend(family, root, [TEXT_AFTER_CALL[family]]), req)
    text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
    assert [e.name for e in events if isinstance(e, ev.ToolCallStarted)] == ["get_weather"]
    assert text == AFTER


def test_gemma4_text_after_a_call_is_not_dropped():
    p = FAMILIES["gemma4"].parser(False, {}, {})
    events = []
    for piece in ("<|tool_call>", "call:get_weather{city:", '<|"|>', "Rome", '<|"|>', "}", " I", " checked", " it.",
                  "<tool_call|>"):
        events += p.feed(piece)[0]
    events += p.finish()
    assert "".join(e.text for e in events if isinstance(e, ev.TextDelta)) == "I checked it."


@pytest.mark.parametrize("family", ["qwen", "qwen3_coder", "minimax_m2", "deepseek_v3",
                                    "deepseek_r1"])
def test_text_after_a_call_is_the_same_fed_a_character_at_a_time(family):
    """The parser fed one character at a time (every marker and every space split) gives what it gives whole."""
    raw = TEXT_AFTER_CALL[family]

    def parse(pieces):
        events = ff.parsed(family, pieces, {"get_weather": WEATHER.parameters}, raw.startswith("</think>"))
        return ff.text_of(events), ff.calls_of(events)

    assert parse(list(raw)) == parse([raw]) == (AFTER, ["get_weather"])


def test_a_call_after_text_in_the_same_block_is_still_a_call():
    invoke = '<invoke name="get_weather">\n<parameter name="city">{}</parameter>\n</invoke>\n'
    raw = ("</think>\n<minimax:tool_call>\n" + invoke.format("Rome") + "Now  the other one.\n" + invoke.format("Oslo")
           + "</minimax:tool_call>")
    out = ff.parsed("minimax_m2", raw, {"get_weather": WEATHER.parameters}, True)  # (it opens thinking)
    assert ff.calls_of(out) == ["get_weather", "get_weather"]
    assert ff.text_of(out) == "Now  the other one."
