"""DeepSeek V3.2 (``deepseek_v32``, DSML calls): its real template (llama.cpp's ``DeepSeek-V3.2.jinja``), its
markup tokens, and a tiny random-weight ``deepseek_v32`` model (``family_models``)."""

from __future__ import annotations

import json

import pytest

import family_checks as fc
from tinytitan import events as ev

B, E = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"
LONG = "x = 1\n" * 30


def invoke(name: str, **params) -> str:
    body = "\n".join(f'<｜DSML｜parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
                     f'{v if isinstance(v, str) else json.dumps(v)}</｜DSML｜parameter>' for k, v in params.items())
    return f'\n<｜DSML｜invoke name="{name}">\n{body}\n</｜DSML｜invoke>'


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("deepseek-v32")


@pytest.fixture(scope="module")
def model(root):
    return fc.fm.backend("deepseek_v32", root)


def test_detected_with_its_stop_token(root, model):
    fc.check_detected("deepseek_v32", root, model)
    assert model.family.syntax.name == "dsml"


def test_names_and_arguments_stream(root):
    """The ``string`` attribute types each value: "true" streams the text, "false" is JSON."""
    raw = (f"Let me check.\n\n{B}" + invoke("get_weather", city="Paris", days=3)
           + invoke("write_file", path="a.py", content=LONG) + f"\n{E}")
    events = fc.check_streaming("deepseek_v32", root, raw, [("get_weather", {"city": "Paris", "days": 3}),
                                                           ("write_file", {"path": "a.py", "content": LONG})],
                                reasoning=False)
    assert len([e for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == 1]) > 5


def test_closers_inside_string_values(root):
    content = f'see {E} and </｜DSML｜invoke> "here"'
    raw = f"{B}" + invoke("write_file", path="a.md", content=content) + f"\n{E}"
    fc.check_streaming("deepseek_v32", root, raw, [("write_file", {"path": "a.md", "content": content})],
                       reasoning=False)


def test_reasoning_split_and_counted(root):
    raw = f"The user wants weather.</think>Checking.\n\n{B}" + invoke("get_weather", city="Paris") + f"\n{E}"
    fc.check_reasoning("deepseek_v32", root, raw, "The user wants weather.", "Checking.")


@pytest.mark.parametrize("parallel", [True, False])
def test_forced_tool_choice_on_the_model(model, parallel):
    fc.check_forced_on_model(model, B, parallel, max_tokens=400)  # its tags are text: many tokens a call


def test_history_through_its_own_template(root):
    fc.check_history("deepseek_v32", root, [
        f'Let me check.\n\n{B}\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>',
        "<function_results>\n<result>sunny, 21C</result>\n<result>written</result>\n</function_results>"])
