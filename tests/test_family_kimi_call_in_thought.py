"""Kimi K2 Thinking at times opens its tool-call section without closing its thought (vLLM's kimi_k2 reasoning
parser splits there): the section's opener is a special token no prose writes, so it ends the thought and the call
is a call, not reasoning text that leaves the agent's loop without its call. Families whose opener prose can write
(Qwen's ``<tool_call>``) keep it inside a thought as the thought's text."""

from __future__ import annotations

import family_fixtures as ff
from tinytitan import events as ev

KIMI = ("<think>", "I should check.", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.get_weather:0",
        "<|tool_call_argument_begin|>", '{"city": "Paris"}', "<|tool_call_end|>", "<|tool_calls_section_end|>")


def parse(family: str, pieces) -> list:
    return ff.parsed(family, pieces, {"get_weather": {"type": "object"}})


def test_a_kimi_section_opened_inside_a_thought_is_a_call():
    for pieces in (KIMI, list("".join(KIMI))):  # (its tokens, or a character at a time)
        events = parse("kimi_k2", pieces)
        assert [e.name for e in events if isinstance(e, ev.ToolCallStarted)] == ["get_weather"]
        assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta)).strip() == "I should check."
        assert not [e for e in events if isinstance(e, ev.TextDelta) and e.text.strip()]


def test_a_qwen_thought_that_writes_the_opener_keeps_it_as_its_text():
    events = parse("qwen", ["<think>", "I could use <tool_call> here.", "</think>", "Done."])
    assert not [e for e in events if isinstance(e, ev.ToolCallStarted)]
    assert "<tool_call>" in "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta))
