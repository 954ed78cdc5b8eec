"""Kimi K2 (``kimi_k2``): its real templates (llama.cpp's ``moonshotai-Kimi-K2.jinja``, which renders no calls
— they reach it written by the syntax —, and ``moonshotai-Kimi-K2-Thinking.jinja``, which renders them itself
with their ids), its markup tokens, and a tiny random-weight model of its architecture (mlx-lm's ``kimi_k2``,
DeepSeek V3's)."""

from __future__ import annotations

import json

import pytest

import family_checks as fc
import family_fixtures as ff
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest

B, E, CB, ARG, CE = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                     "<|tool_call_argument_begin|>", "<|tool_call_end|>")
LONG = "x = 1\n" * 30


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("kimi")


@pytest.fixture(scope="module")
def model(root):
    return fc.fm.backend("kimi_k2", root)


def test_detected_with_its_stop_token(root, model):
    fc.check_detected("kimi_k2", root, model)
    assert model.config["model_type"] == "kimi_k2"


def test_names_and_arguments_stream(root):
    raw = (f'Let me check.{B}{CB}functions.get_weather:0{ARG}{{"city": "Paris", "days": 3}}{CE}'
           f'{CB}functions.write_file:1{ARG}{{"path": "a.py", "content": {json.dumps(LONG)}}}{CE}{E}')
    events = fc.check_streaming("kimi_k2", root, raw, [("get_weather", {"city": "Paris", "days": 3}),
                                                      ("write_file", {"path": "a.py", "content": LONG})])
    assert len([e for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == 1]) > 5


def test_closers_inside_string_values(root):
    content = f'see {CE}{E} and "{CB}functions.x:9{ARG}{{}}" here'
    raw = f'{B}{CB}functions.write_file:0{ARG}{{"path": "a.md", "content": {json.dumps(content)}}}{CE}{E}'
    fc.check_streaming("kimi_k2", root, raw, [("write_file", {"path": "a.md", "content": content})])


def test_a_head_that_is_no_call_id_is_text(root):
    raw = f'{B}{CB}not a call id{ARG}{{"x": 1}}{CE}{E}Done.'
    events = ff.generate(ff.backend("kimi_k2", root, [raw]), ChatRequest("m", fc.USER, fc.TOOLS))
    assert not fc.calls_of(events)
    assert "not a call id" in "".join(e.text for e in events if isinstance(e, ev.TextDelta))


def test_reasoning_split_and_counted(root):
    """K2-Thinking writes its thought in <think> after the generation prompt."""
    raw = f'<think>The user wants weather.</think>Checking.{B}{CB}functions.get_weather:0{ARG}{{"city": "Paris"}}{CE}{E}'
    b = ff.backend("kimi_k2_thinking", root, [raw])
    assert b.family.name == "kimi_k2" and b.family.markup.think_open == "<think>"
    events = ff.generate(b, ChatRequest("m", fc.USER, fc.TOOLS))
    assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta)) == "The user wants weather."
    assert "".join(e.text for e in events if isinstance(e, ev.TextDelta)) == "Checking."
    assert fc.calls_of(events) == [("get_weather", {"city": "Paris"})]
    assert 0 < events[-1].usage.reasoning_tokens < events[-1].usage.completion_tokens
    assert ff.backend("kimi_k2", root).family.markup.think_open is None  # K2 Instruct: no thinking markers


@pytest.mark.parametrize("parallel", [True, False])
def test_forced_tool_choice_on_the_model(model, parallel):
    fc.check_forced_on_model(model, B, parallel)


def test_strict_tools_masked_under_auto(root):
    fc.check_strict_under_auto("kimi_k2", root, f"{B}{CB}functions.get_weather:0{ARG}")


def test_history_written_in_its_markup_where_the_template_renders_no_calls(root):
    text = fc.check_history("kimi_k2", root, [
        f"Let me check.\n{B}{CB}functions.get_weather:0{ARG}{{\"city\": \"Paris\", \"days\": 3}}{CE}"
        f"{CB}functions.write_file:1{ARG}", f"{CE}{E}<|im_end|><|im_system|>tool<|im_middle|>sunny, 21C"])
    assert "<|tool_call_begin|>" in text


def test_history_through_the_thinking_template_with_kimi_ids(root):
    fc.check_history("kimi_k2_thinking", root, [
        f"{B}{CB}functions.get_weather:0{ARG}{{\"city\": \"Paris\", \"days\": 3}}{CE}{CB}functions.write_file:1{ARG}",
        "## Return of functions.get_weather:0\nsunny, 21C", "## Return of functions.write_file:1\nwritten"])


def test_chat_participant_names_reach_the_template_that_names_turns_by_them(root):
    """K2-Thinking's template heads each turn with ``message.get('name') or message['role']``: Chat's ``name``
    on a system, user or assistant message (the SDK's "name for the participant") is what it reads there."""
    from tinytitan.protocols.registry import all_protocols

    (chat,) = [p for p in all_protocols() if p.name == "openai_chat"]
    body = {"model": "m", "messages": [
        {"role": "developer", "content": "Referee the debate.", "name": "moderator"},
        {"role": "user", "content": "Tabs.", "name": "alice"}, {"role": "assistant", "content": "Noted.", "name": "judge"},
        {"role": "user", "content": "Spaces.", "name": "bob"}, {"role": "user", "content": "And you?"}]}
    text = ff.backend("kimi_k2_thinking", root).prepare(chat.chat_request(chat.validate(json.dumps(body).encode()))).prompt_text
    for head, turn in (("<|im_system|>moderator", "Referee the debate."), ("<|im_user|>alice", "Tabs."),
                       ("<|im_assistant|>judge", "<think></think>Noted."), ("<|im_user|>bob", "Spaces."), ("<|im_user|>user", "And you?")):
        assert f"{head}<|im_middle|>{turn}" in text, text
