"""MiniMax M2 (``minimax_m2``): its real template (llama.cpp's ``unsloth-MiniMax-M2.jinja``), its markup
tokens, and a tiny random-weight model of its architecture (mlx-lm's ``minimax``)."""

from __future__ import annotations

import json

import pytest

import family_checks as fc
import family_fixtures as ff
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest

B, E = "<minimax:tool_call>", "</minimax:tool_call>"
LONG = "x = 1\n" * 30


def invoke(name: str, **params) -> str:
    body = "".join(f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>\n'
                   for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>\n'


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("minimax")


@pytest.fixture(scope="module")
def model(root):
    return fc.fm.backend("minimax_m2", root)


def test_detected_with_its_stop_token(root, model):
    fc.check_detected("minimax_m2", root, model)
    assert model.family.stop_tokens == ("[e~[",)


def test_names_and_arguments_stream(root):
    """The template opens a thought: the answer closes it, then calls (several in one block), a string value
    streamed as written, a number typed by the tool's schema."""
    raw = (f"Plan.</think>\n\nLet me check.\n{B}\n" + invoke("get_weather", city="Paris", days=3)
           + invoke("write_file", path="a.py", content=LONG) + E)
    events = fc.check_streaming("minimax_m2", root, raw, [("get_weather", {"city": "Paris", "days": 3}),
                                                         ("write_file", {"path": "a.py", "content": LONG})])
    assert len([e for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == 1]) > 5
    assert "".join(e.text for e in events if isinstance(e, ev.TextDelta)) == "Let me check."


def test_closers_inside_string_values(root):
    content = f'see {E} and </invoke><invoke name="x"> "here"'
    raw = f"</think>{B}\n" + invoke("write_file", path="a.md", content=content) + E
    fc.check_streaming("minimax_m2", root, raw, [("write_file", {"path": "a.md", "content": content})])


def test_reasoning_split_and_counted(root):
    raw = f"The user wants weather.</think>\n\nChecking.\n{B}\n" + invoke("get_weather", city="Paris") + E
    fc.check_reasoning("minimax_m2", root, raw, "The user wants weather.", "Checking.")


@pytest.mark.parametrize("parallel", [True, False])
def test_forced_tool_choice_on_the_model(model, parallel):
    fc.check_forced_on_model(model, B, parallel, thought_open=True)


def test_strict_tools_masked_under_auto(root):
    fc.check_strict_under_auto("minimax_m2", root, f'</think>{B}\n<invoke name="get_weather">\n')


def test_structured_output_closes_the_thought_first(root):
    """The template always opens a thought; an output format closes it at once, then the document."""
    b = ff.backend("minimax_m2", root)
    from tinytitan.chat_request import Grammar

    req = ChatRequest("m", fc.USER, grammar=Grammar("json_schema", {"type": "object"}, where="response_format"))
    matcher = b.prepare(req).grammar.matcher()
    hf = b.tokenizer
    assert matcher.try_consume_tokens(hf.encode('</think>{"a":1}', add_special_tokens=False)) > 0
    assert matcher.is_accepting()


def test_history_through_its_own_template(root):
    fc.check_history("minimax_m2", root, [
        f'Let me check.\n{B}\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">3</parameter>\n</invoke>\n<invoke name="write_file">',
        "]~b]tool\n<response>sunny, 21C</response>\n<response>written</response>[e~["])
