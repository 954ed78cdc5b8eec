"""DeepSeek V3.1 (``deepseek_v3``): its real template (llama.cpp's ``deepseek-ai-DeepSeek-V3.1.jinja``), its
markup tokens, and a tiny random-weight ``deepseek_v3`` model (``family_models``)."""

from __future__ import annotations

import pytest

import family_checks as fc

B, E, CB, SEP, CE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", \
    "<｜tool▁call▁end｜>"
LONG = "x = 1\n" * 30


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("deepseek")


@pytest.fixture(scope="module")
def model(root):
    return fc.fm.backend("deepseek_v3", root)


def test_detected_with_its_stop_token(root, model):
    fc.check_detected("deepseek_v3", root, model)
    assert "<｜end▁of▁sentence｜>" in model.family.stop_tokens


def test_names_and_arguments_stream(root):
    raw = (f'Let me check.{B}{CB}get_weather{SEP}{{"city": "Paris", "days": 3}}{CE}'
           f'{CB}write_file{SEP}{{"path": "a.py", "content": {LONG!r}}}{CE}{E}').replace("'", '"')
    events = fc.check_streaming("deepseek_v3", root, raw, [("get_weather", {"city": "Paris", "days": 3}),
                                                          ("write_file", {"path": "a.py", "content": LONG})],
                                reasoning=False)
    assert len([e for e in events if type(e).__name__ == "ToolCallArgsDelta" and e.index == 1]) > 5


def test_closers_inside_string_values(root):
    content = f'see {CE}{E} and "{CB}x{SEP}{{}}" here'
    raw = f'{B}{CB}write_file{SEP}{{"path": "a.md", "content": {fc.json.dumps(content, ensure_ascii=False)}}}{CE}{E}'
    fc.check_streaming("deepseek_v3", root, raw, [("write_file", {"path": "a.md", "content": content})],
                       reasoning=False)


def test_reasoning_split_and_counted(root):
    raw = f'The user wants weather.</think>Checking.{B}{CB}get_weather{SEP}{{"city": "Paris"}}{CE}{E}'
    fc.check_reasoning("deepseek_v3", root, raw, "The user wants weather.", "Checking.")


@pytest.mark.parametrize("parallel", [True, False])
def test_forced_tool_choice_on_the_model(model, parallel):
    fc.check_forced_on_model(model, B, parallel)


def test_strict_tools_masked_under_auto(root):
    fc.check_strict_under_auto("deepseek_v3", root, f"{B}{CB}get_weather{SEP}")


def test_history_through_its_own_template(root):
    text = fc.check_history("deepseek_v3", root, [
        f'{B}{CB}get_weather{SEP}{{"city": "Paris", "days": 3}}{CE}{CB}write_file{SEP}',
        f"{CE}{E}<｜end▁of▁sentence｜><｜tool▁output▁begin｜>sunny, 21C<｜tool▁output▁end｜>"])
    assert text.endswith("<｜Assistant｜></think>")  # thinking off: the template closes the thought itself
