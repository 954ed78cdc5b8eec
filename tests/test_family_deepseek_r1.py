"""DeepSeek V3-0324 / R1 / R1-0528 and R1-0528's distills (``deepseek_r1``): the older call format, the call's type
before the separator and its name after it, the arguments in a ```` ```json ```` fence, the calls a line apart:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{ARGS}\\n```<｜tool▁call▁end｜>…

Its real template (V3-0324's, ``tests/data/templates``), whose model_type is V3.1's (``deepseek_v3``): the
template alone tells the two formats apart."""

from __future__ import annotations

import json

import pytest

import family_checks as fc
import family_fixtures as ff
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.families import FAMILIES

B, E, CB, SEP, CE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", \
    "<｜tool▁call▁end｜>"
LONG = "x = 1\n" * 30


def call(name: str, args: dict) -> str:
    return f"{CB}function{SEP}{name}\n```json\n{json.dumps(args, ensure_ascii=False)}\n```{CE}"


def block(*calls: tuple[str, dict]) -> str:
    return B + "\n".join(call(n, a) for n, a in calls) + E


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("deepseek_r1")


@pytest.fixture(scope="module")
def model(root):
    return fc.fm.backend("deepseek_r1", root)


def test_detected_by_its_template_over_its_model_type(root, model):
    fc.check_detected("deepseek_r1", root, model)
    assert "<｜end▁of▁sentence｜>" in model.family.stop_tokens


def test_names_and_arguments_stream(root):
    calls = [("get_weather", {"city": "Paris", "days": 3}), ("write_file", {"path": "a.py", "content": LONG})]
    events = fc.check_streaming("deepseek_r1", root, "Let me check." + block(*calls), calls, reasoning=False)
    assert len([e for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == 1]) > 5
    assert ff.text_of(events) == "Let me check."


def test_closers_and_fences_inside_string_values(root):
    content = f'see ```{CE}{E}\n``` and "{CB}function{SEP}x\n```json\n{{}}" here'
    fc.check_streaming("deepseek_r1", root, block(("write_file", {"path": "a.md", "content": content})),
                       [("write_file", {"path": "a.md", "content": content})], reasoning=False)


@pytest.mark.parametrize("step", [1, 2, 5])
def test_pieces_of_any_size(step):
    raw = "Checking." + block(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 2}))
    events = ff.parsed("deepseek_r1", [raw[i:i + step] for i in range(0, len(raw), step)])
    assert fc.calls_of(events) == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 2})]
    assert ff.text_of(events) == "Checking."


@pytest.mark.parametrize("written", [
    "get_weather\n```json\n{ARGS}\n```",  # the template's own
    "get_weather\n```\n{ARGS}\n```",  # a fence naming no language
    "get_weather\n{ARGS}",  # no fence
    "get_weather```json\n{ARGS}```",  # no line breaks
    " get_weather \n\n```json {ARGS} ``` \n",  # spaces about
])
def test_a_model_that_strays_from_the_fence_is_understood(written, caplog):
    """The name and the arguments are read however the fence is (or is not) written, and the checking grammar
    reads the same (a disagreement is logged)."""
    import logging

    args = {"city": "Paris", "note": "```"}
    raw = f"{B}{CB}function{SEP}" + written.replace("{ARGS}", json.dumps(args)) + f"{CE}{E}"
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        for pieces in ([raw], list(raw)):
            events = ff.parsed("deepseek_r1", pieces)
            assert fc.calls_of(events) == [("get_weather", args)], (raw, events)
            assert ff.text_of(events) == ""
    assert not caplog.records, caplog.text


def test_cut_at_any_point():
    """An answer cut anywhere (a cap, a stop string): only the real names are called, never the type, each with
    the arguments written so far; markup cut before any call is its text (as V3.1's), a fence never is."""
    first, second = ("get_weather", {"city": "Paris"}), ("write_file", {"path": "a", "content": "b"})
    raw = "Hi." + block(first, second)
    for i in range(len(raw) + 1):
        events = ff.parsed("deepseek_r1", [raw[:i]])
        names = ff.calls_of(events)
        assert set(names) <= {"get_weather", "write_file"}, (raw[:i], events)
        assert names == ["get_weather", "write_file"][:len(names)]
        text = ff.text_of(events)
        assert "```" not in text or not names, (raw[:i], text)
        assert fc.calls_of(events) == [first, second][:len(fc.calls_of(events))]
        for done in (e for e in events if isinstance(e, ev.ToolCallDone) and not e.complete):
            assert json.dumps([first, second][done.index][1]).startswith(done.arguments), (raw[:i], done)
    assert fc.calls_of(ff.parsed("deepseek_r1", [raw])) == [first, second]


def test_a_head_the_cap_cut_is_dropped():
    """The cap strikes before the call's name is whole (``function<｜tool▁sep｜>get_wea``): the head of a call cut
    short is not the answer's text, as V3.1's is not; the call before it stays whole."""
    first = call("get_weather", {"city": "Paris"})
    for opened in (B, B + first + "\n"):
        for head in (CB, f"{CB}function", f"{CB}function{SEP}", f"{CB}function{SEP}get_wea"):
            p = FAMILIES["deepseek_r1"].parser(False, {}, ff.WEATHER_TOOL)
            events = p.feed("Hi." + opened + head)[0] + p.finish(cut=True)
            assert ff.text_of(events) == "Hi.", (opened + head, events)
            assert fc.calls_of(events) == ([("get_weather", {"city": "Paris"})] if first in opened else [])


def test_the_v31_family_keeps_its_own_format():
    assert FAMILIES["deepseek_v3"].render_calls([("f", {"a": 1})]) == f'{B}{CB}f{SEP}{{"a": 1}}{CE}{E}'
    assert FAMILIES["deepseek_r1"].render_calls([("f", {"a": 1}), ("g", {})]) == block(("f", {"a": 1}), ("g", {}))


def test_reasoning_split_and_counted(root):
    raw = "The user wants weather.</think>Checking." + block(("get_weather", {"city": "Paris"}))
    b = ff.backend("deepseek_r1", root, [raw])
    req = ChatRequest("m", fc.USER, fc.TOOLS, reasoning=True)
    # the V3-0324 template opens no thought: the model writes <think> itself
    assert not b.family.starts_in_reasoning(b.prepare(req).prompt_text)
    events = ff.generate(ff.backend("deepseek_r1", root, ["<think>" + raw]), req)
    assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta)) == "The user wants weather."
    assert ff.text_of(events) == "Checking."
    assert fc.calls_of(events) == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("parallel", [True, False])
def test_forced_tool_choice_on_the_model(model, parallel):
    """Every sampled answer is read as calls by this family's parser: the mask wrote this format."""
    fc.check_forced_on_model(model, B, parallel)


@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_a_forced_call_is_written_in_this_format(root, choice):
    """tool_choice required or a named tool: the mask writes the section as the template does, the type, the
    name on its line, the arguments fenced (a model of this template never saw V3.1's form)."""
    import random
    import re

    from grammar_walk import random_document

    b = ff.backend("deepseek_r1", root)
    named = () if choice == "required" else (choice,)  # a tool named by tool_choice: the calls it may name
    req = ChatRequest("m", fc.USER, fc.TOOLS, tool_choice="required", tool_names=named, reasoning=False)
    compiled = b.prepare(req).grammar
    one = re.escape(CB) + r"function" + re.escape(SEP) + r"(get_weather|write_file)\n```json\n(\{.*?\})\n```" \
        + re.escape(CE)
    rng = random.Random(choice)
    for _ in range(6):
        raw = b.tokenizer.decode(random_document(compiled, rng, set(b.tokenizer.eos_token_ids)),
                                 skip_special_tokens=False)
        assert re.fullmatch(re.escape(B) + f"{one}(\n{one})*" + re.escape(E), raw, re.S), raw
        calls = fc.calls_of(ff.parsed("deepseek_r1", [raw], fc.SCHEMAS))
        assert calls and all(n in (named or fc.SCHEMAS) for n, _ in calls), raw


def test_strict_tools_masked_under_auto(root):
    fc.check_strict_under_auto("deepseek_r1", root, f"{B}{CB}function{SEP}get_weather\n```json\n")


def test_tools_declared_in_its_format_and_history_through_its_own_template(root):
    """The template renders no tool list: the server writes one, its example call in this format; past calls go
    through the template itself, in the very format the model writes."""
    text = fc.check_history("deepseek_r1", root, [
        "get_weather tool", "write_file tool",
        f"{B}{CB}function{SEP}function_name\n```json\n" + '{"parameter": "value"}\n```' + f"{CE}{E}",
        "Let me check." + B + call("get_weather", {"city": "Paris", "days": 3}) + "\n"
        + call("write_file", {"path": "a.md", "content": "# Note\nline two"}) + E + "<｜end▁of▁sentence｜>",
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny, 21C<｜tool▁output▁end｜>"])
    assert text.endswith("<｜User｜>Thanks. And tomorrow?<｜Assistant｜>")


def test_an_assistant_turn_sent_back_reads_as_the_same_calls(root):
    """The template's rendering of a turn's calls, decoded by this family's parser, is those calls."""
    from tinytitan.chat_request import ToolCall

    calls = (ToolCall("c1", "get_weather", '{"city": "Paris"}'), ToolCall("c2", "write_file", '{"path": "b", "content": "c"}'))
    user = Message("user", "Go.")
    b = ff.backend("deepseek_r1", root)
    text = b.render(ChatRequest("m", (user, Message("assistant", None, tool_calls=calls)), fc.TOOLS, reasoning=False))
    start = text.rindex(B)  # (the tool list's example call comes first)
    turn = text[start:text.index(E, start) + len(E)]
    assert fc.calls_of(ff.parsed("deepseek_r1", [turn])) == [("get_weather", {"city": "Paris"}),
                                                            ("write_file", {"path": "b", "content": "c"})]



async def test_calls_on_every_protocol(serve, root):
    """Chat Completions, Responses, Messages and Ollama, streamed and not: two calls of one section, by their
    names, with their arguments; the text before them is the answer's text."""
    import httpx

    from protocol_folds import TOOL_PROTOCOLS, told_everywhere

    calls = [("get_weather", {"city": "Rome"}), ("get_weather", {"city": "Oslo", "days": 2})]
    raw = "Checking both." + block(*calls)
    b = ff.backend("deepseek_r1", root, [raw] * (2 * len(TOOL_PROTOCOLS)))
    s = await serve(backend=b)
    async with httpx.AsyncClient(timeout=60) as client:
        async for proto, stream, told in told_everywhere(client, s, b.model_id, raw, "get_weather", fc.WEATHER):
            got = [(n, a if isinstance(a, dict) else json.loads(a)) for n, a, *_ in told.calls]
            assert got == calls, (proto, stream, told)
            assert told.text.strip() == "Checking both.", (proto, stream, told)
