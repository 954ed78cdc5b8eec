"""An unforced call the output cap cuts after its opening marker, before any call started, is no answer text —
whatever the family's call syntax, and wherever in the head the cap strikes (inside the name, the name closed,
the arguments' key begun). A forced one is kept out too: test_forced_call_cut_short.py. Markup that is no
call's head stays text."""

from __future__ import annotations

import pytest

from anthropic_util import body, post

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


@pytest.mark.parametrize("cap", [6, 9, 12, 14, 15, 16, 17])  # up to '"arguments":', before the call starts
async def test_unforced_call_cut_short_leaks_no_markup(serve, cap):
    s = await serve(["Sure. " + CALL])
    d = (await post(s, body(tools=TOOLS, max_tokens=cap))).json()
    assert d["stop_reason"] == "max_tokens"
    text = "".join(b.get("text", "") for b in d["content"])
    assert "<tool_call>" not in text, d["content"]


HEADS = [("QWEN_FAMILY", '\n{"name": "get_weather"'), ("QWEN_FAMILY", '\n{"name": "get_weather", "argum'),
         ("QWEN_FAMILY", '\n{"name": "get_weather", "arguments": '), ("QWEN3_CODER", "\n<function=get_we"),
         ("LLAMA3", '{"name": "get_weather", "param')]
# every other call syntax, cut inside its head
OTHERS = [("GLM", "get_we"), ("MISTRAL", "get_weather[AR"), ("GEMMA4", "call:get_we"),
          ("FUNCTION_GEMMA", "call:get_we"), ("GEMMA", "\nget_we"), ("KIMI_K2", "<|tool_call_begin|>functions.get_we"),
          ("MINIMAX_M2", '\n<invoke name="get_we'), ("DEEPSEEK_V3", "<｜tool▁call▁begin｜>get_we"),
          ("DEEPSEEK_V32", '\n<｜DSML｜invoke name="get_we'), ("MISTRAL", '[{"name": "get_we'),
          ("MISTRAL", '[{"name": "get_weather", "argu'), ("MISTRAL", "get_weather[CALL_ID]a1b2")]


@pytest.mark.parametrize("family,head", HEADS + OTHERS)
def test_every_familys_call_head_cut_by_the_cap_is_no_text(family, head):
    from tinytitan.engine import families
    from tinytitan.events import TextDelta

    fam = getattr(families, family)
    p = fam.parser(False, {}, {"get_weather": TOOLS[0]["input_schema"]}, True, False)
    events = p.feed("Sure. ")[0] + p.feed(fam.markup.tool_open)[0] + p.feed(head)[0] + p.finish(cut=True)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Sure."


def test_markup_that_is_no_call_head_stays_text_when_cut():
    from tinytitan.engine import families
    from tinytitan.events import TextDelta

    p = families.QWEN_FAMILY.parser(False, {}, {}, True, False)
    events = p.feed("<tool_call>")[0] + p.feed("delta, not a call")[0] + p.finish(cut=True)
    assert "delta, not a call" in "".join(e.text for e in events if isinstance(e, TextDelta))


# the same after calls already whole in the block (a section's, a list's): the next call cut in its head
SECOND = [("KIMI_K2", '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}'
           '<|tool_call_end|>', "<|tool_call_begin|>functions.get_we"),
          ("MINIMAX_M2", '\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>',
           '\n<invoke name="get_we'),
          ("DEEPSEEK_V3", '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>',
           "<｜tool▁call▁begin｜>get_we")]


@pytest.mark.parametrize("family,first,head", SECOND)
def test_a_later_call_cut_in_its_head_is_no_text(family, first, head):
    from tinytitan.engine import families
    from tinytitan.events import TextDelta, ToolCallDone

    fam = getattr(families, family)
    p = fam.parser(False, {}, {"get_weather": TOOLS[0]["input_schema"]}, True, False)
    events = (p.feed("Sure. ")[0] + p.feed(fam.markup.tool_open)[0] + p.feed(first)[0] + p.feed(head)[0]
              + p.finish(cut=True))
    assert [e for e in events if isinstance(e, ToolCallDone)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Sure.", events


# the cap strikes inside an opener of several tokens, before the opener is whole
PARTIAL_OPENERS = [("DEEPSEEK_V32", 5), ("DEEPSEEK_V32", 9), ("DEEPSEEK_V3", 4), ("KIMI_K2", 6),
                   ("MINIMAX_M2", 8), ("QWEN_FAMILY", 5), ("QWEN3_CODER", 7)]


@pytest.mark.parametrize("family,length", PARTIAL_OPENERS)
def test_an_opener_cut_by_the_cap_is_no_text(family, length):
    from tinytitan.engine import families
    from tinytitan.events import TextDelta

    fam = getattr(families, family)
    opener = fam.markup.tool_open
    assert 0 < length < len(opener), opener
    p = fam.parser(False, {}, {"get_weather": TOOLS[0]["input_schema"]}, True, False)
    events = p.feed("Sure. ")[0] + p.feed(opener[:length])[0] + p.finish(cut=True)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Sure."


def test_text_that_only_looks_like_an_opener_stays_when_not_cut():
    from tinytitan.engine import families
    from tinytitan.events import TextDelta

    p = families.QWEN_FAMILY.parser(False, {}, {}, True, False)
    events = p.feed("a <tool")[0] + p.finish(cut=False)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a <tool"
