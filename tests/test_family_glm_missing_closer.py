"""GLM writes Qwen's markers around its key/value calls: a block whose closer the model left out, straight
followed by the next opener, is two calls there too, not the second call returned as text."""

from __future__ import annotations

import pytest

import family_fixtures as ff

KV = "get_weather\n<arg_key>city</arg_key>\n<arg_value>{}</arg_value>"
RAW = f"<tool_call>{KV.format('Rome')}\n<tool_call>{KV.format('Paris')}\n</tool_call>"


@pytest.mark.parametrize("split", ["whole", "chars"])
def test_glm_next_opener_ends_a_block_missing_its_closer(split):
    events = ff.parsed("glm", [RAW] if split == "whole" else list(RAW))
    assert (ff.text_of(events), ff.arguments_of(events)) == ("", ['{"city": "Rome"}', '{"city": "Paris"}'])


def test_glm_token_by_token_through_the_engine(tmp_path):
    import family_checks as fc
    from tinytitan.chat_request import ChatRequest

    events = ff.generate(ff.backend("glm", tmp_path, [RAW]), ChatRequest("m", fc.USER, fc.TOOLS))
    assert fc.calls_of(events) == [("get_weather", {"city": "Rome"}), ("get_weather", {"city": "Paris"})], events
    assert ff.text_of(events) == "" and events[-1].reason == "tool_calls"
