"""The Lark grammars in grammars/ define each tool-call format and check every completed call block.

For every format: every scripted raw output of test_families_parsing / test_families_roundtrip
(family_cases.py), run through the engine's own path, has each completed block checked by its grammar, and the
grammar's calls equal what the streaming decoder sent (ToolCallStarted name + ToolCallDone arguments, as JSON
values); malformed blocks are rejected; a disagreement is logged (never raised, no event changed); a broken
grammar fails at load."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import pytest

import family_fixtures as ff
import family_cases as fc
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.families import FAMILIES, grammar
from tinytitan.engine.families.grammar import BlockMismatch, GrammarError, parse_block

TOOLS = {t.name: t.parameters for t in (fc.WEATHER, fc.WRITE)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families-grammars")


@pytest.fixture
def blocks(monkeypatch):
    """Every block the parsers check: (format, text, streamed calls, tools)."""
    seen = []
    real = grammar.check_block

    def spy(fmt, text, streamed, tools=None):
        seen.append((fmt, text, list(streamed), tools))
        return real(fmt, text, streamed, tools)

    monkeypatch.setattr(grammar, "check_block", spy)
    return seen


def _values(calls):
    return [(name, json.loads(args)) for name, args in calls]


def _grammar_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "grammar" in r.getMessage()]


def _assert_blocks_agree(blocks):
    """Blocks with calls: the grammar reads exactly the streamed calls. Blocks the decoder returned as text:
    the grammar rejects them too."""
    for fmt, text, streamed, tools in blocks:
        if streamed:
            assert _values(parse_block(fmt, text, tools)) == _values(streamed), (fmt, text)
        else:
            with pytest.raises(BlockMismatch):
                parse_block(fmt, text, tools)


def _streamed(events):
    return [(e.name, next(d.arguments for d in events if isinstance(d, ev.ToolCallDone) and d.index == e.index))
            for e in events if isinstance(e, ev.ToolCallStarted)]


# ---------------------------------------------------------------------------------------------------------
# The scripted outputs of test_families_parsing (family_cases.CASES)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family,case", [(f, i) for f, cases in fc.CASES.items() for i in range(len(cases))])
def test_scripted_outputs_agree_with_the_grammar(root, family, case, blocks, caplog):
    raw, expected = fc.CASES[family][case]
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = fc.run(root, family, raw)
    calls = _streamed(events)
    assert len(calls) == sum(1 for e in expected if e[0] == "call")
    # every streamed call was checked, once, in a completed block
    assert [c for _, _, streamed, _ in blocks for c in streamed] == calls
    _assert_blocks_agree(blocks)
    assert not _grammar_warnings(caplog)


@pytest.mark.parametrize("family,module,raw", fc.GEMMA_CALLS)
def test_gemma_call_formats_agree_with_the_grammar(family, module, raw, blocks, caplog):
    p = FAMILIES[family].parser(False, {}, {})
    events = []
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        for i in range(0, len(raw), 3):
            events += p.feed(raw[i:i + 3])[0]
        events += p.finish()
    assert [fmt for fmt, *_ in blocks] == [family]
    assert [c for _, _, streamed, _ in blocks for c in streamed] == _streamed(events)
    _assert_blocks_agree(blocks)
    assert not _grammar_warnings(caplog)


@pytest.mark.parametrize("family,raw", [
    ("qwen", '<tool_call>\n{"name": "write_file", "arguments": {"path": "p", "content": "' + "x" * 200
     + '"}}\n</tool_call>'),
    ("mistral", '[TOOL_CALLS]write_file[ARGS]{"path": "p", "content": "' + "x" * 200 + '"}'),
    ("glm", "<tool_call>write_file\n<arg_key>content</arg_key>\n<arg_value>" + "x" * 200
     + "</arg_value>\n</tool_call>"),
    ("gpt_oss", '<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{"content": "'
     + "x" * 200 + '"}<|call|>'),
    ("qwen3_coder", "<tool_call>\n<function=write_file>\n<parameter=path>\nnotes.txt\n</parameter>\n"
     "<parameter=content>\n" + "line\n" * 40 + "</parameter>\n</function>\n</tool_call>"),
])
def test_streamed_long_arguments_agree_with_the_grammar(root, family, raw, blocks, caplog):
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = fc.run(root, family, raw)
    assert [c for _, _, s, _ in blocks for c in s] == _streamed(events) and _streamed(events)
    _assert_blocks_agree(blocks)
    assert not _grammar_warnings(caplog)


# ---------------------------------------------------------------------------------------------------------
# The template renderings of test_families_roundtrip (family_cases.CONVERSATION)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", list(ff.SPECS))
def test_rendered_calls_agree_with_the_grammar(root, family, blocks, caplog):
    b = ff.backend(family, root)
    calls = fc.CALLS[:1] if family == "llama3" else fc.CALLS
    turn = Message("assistant", "Let me check.", tool_calls=calls, reasoning="I need two tools.")
    history = fc.CONVERSATION[:2]
    prefix = fc.render_prompt(b, history, family not in fc.OPENED_BY_USER_TURN)
    rest = fc.render_prompt(b, history + (turn,), False)[len(prefix):]
    if fc.TURN_END[family]:
        rest = rest[: rest.index(fc.TURN_END[family])]
    b.entries = [type(b.entries[0])(rest)]
    thinking = False if family in fc.TEMPLATE_KWARGS else None
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = ff.generate(b, ChatRequest("m", history, fc.TOOLS, reasoning=thinking))
    streamed = [c for _, _, s, _ in blocks for c in s]
    assert streamed == _streamed(events)
    assert _values(streamed) == [(c.name, json.loads(c.arguments)) for c in calls]
    _assert_blocks_agree(blocks)
    assert not _grammar_warnings(caplog)


# ---------------------------------------------------------------------------------------------------------
# Each grammar on its own
# ---------------------------------------------------------------------------------------------------------

WELL_FORMED = [
    # format, block, calls
    ("json", '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
     [("get_weather", {"city": "Paris", "days": 3})]),
    ("json", '{"name": "get_weather", "parameters": {"city": "Rome"}}', [("get_weather", {"city": "Rome"})]),
    ("json", '{"arguments": {"name": "x"}, "name": "write_file", "id": "c1"}', [("write_file", {"name": "x"})]),
    ("json", '{"name": "f", "arguments": "{\\"a\\": [1, null]}"}', [("f", {"a": [1, None]})]),
    ("json", '{"type": "function", "function": {"name": "f", "arguments": {}}}', [("f", {})]),
    ("json", '{"name": "f"}', [("f", {})]),
    ("json", '[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]',
     [("f", {"a": 1}), ("g", {})]),
    ("json", '{"name": "f", "arguments": {}}; {"name": "g", "arguments": {}}\n{"name": "h", "arguments": {}}',
     [("f", {}), ("g", {}), ("h", {})]),
    ("xml", '<function=f>\n<parameter=a>\n  indented\n\n</parameter>\n</function>', [("f", {"a": "  indented\n"})]),
    ("xml", "<function=get_weather><parameter=days>4</parameter></function>", [("get_weather", {"days": 4})]),
    ("xml", "<function=f></function>", [("f", {})]),
    # several functions in one block: Qwen3-Coder's own parser reads them all
    ("xml", "<function=f></function>\n<function=g><parameter=a>1</parameter></function>",
     [("f", {}), ("g", {"a": "1"})]),
    ("kv", "f\n<arg_key>a</arg_key>\n<arg_value>[1, 2]</arg_value>", [("f", {"a": [1, 2]})]),
    ("kv", "get_weather<arg_key>city</arg_key><arg_value> 12 </arg_value>", [("get_weather", {"city": " 12 "})]),
    ("kv", "f\n", [("f", {})]),
    ("mistral", 'f[CALL_ID]a1b2c3d4e[ARGS]{"a": 1}', [("f", {"a": 1})]),
    ("mistral", '{"name": "f", "arguments": {"a": 1}}', [("f", {"a": 1})]),
    ("pythonic", "f(a='x', b=-2.5, c=[True, None], d={'k': (1, 2)},)", [("f", {"a": "x", "b": -2.5, "c": [True, None],
                                                                          "d": {"k": [1, 2]}})]),
    ("pythonic", 'tools.f(\n  text="""two\nlines""",\n)\ng()', [("tools.f", {"text": "two\nlines"}), ("g", {})]),
    ("pythonic", "f(a=1); g(b=[\n1,\n2\n])", [("f", {"a": 1}), ("g", {"b": [1, 2]})]),
    ("gemma4", 'call:f{a:<|"|>x, y: z<|"|>,n:-1.5,b:false,c:null,w:two words}call:g{}',
     [("f", {"a": "x, y: z", "n": -1.5, "b": False, "c": None, "w": "two words"}), ("g", {})]),
    ("gemma4", 'call:f{<|"|>quoted key<|"|>:[1,[2],{x:3}]}', [("f", {"quoted key": [1, [2], {"x": 3}]})]),
    ("function_gemma", "call:f{a:<escape>x<escape>}", [("f", {"a": "x"})]),
    ("harmony", '<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}',
     [("f", {"a": 1})]),
    ("harmony", '<|start|>assistant to=browser.search<|channel|>commentary json<|message|>{}',
     [("browser.search", {})]),
]


@pytest.mark.parametrize("fmt,text,calls", WELL_FORMED)
def test_grammar_reads_calls(fmt, text, calls):
    got = parse_block(fmt, text, TOOLS)
    assert [(n, json.loads(a)) for n, a in got] == calls


# (format, block): malformed — from the scripted outputs above, then more
MALFORMED = [
    ("json", '\n{"name": get_weather}\n'),
    ("json", '{"answer": 42} is the result.'),
    ("xml", "\n<oops>\n"),
    ("mistral", "get weather {oops}"),
    ("kv", "get weather now"),
    ("pythonic", "\nprint 'x'\n"),
    ("gemma4", "not a call"),
    ("json", ""),
    ("json", "[]"),
    ("json", '{"name": "f", "arguments": {city: "Paris"}}'),  # unquoted key
    ("json", '{"name": "f", "arguments": {"a": 1,}}'),  # trailing comma
    ("json", '{"name": "f", "arguments": {"a": "unterminated}}'),
    ("json", '{"name": "f", "arguments": {}} and then some text'),
    ("json", '{"name": "f", "name": "g"}'),
    ("json", '{"arguments": {}}'),
    ("xml", "<function=f>\n<parameter=a>\n1\n</parameter>\n"),  # no </function>
    ("xml", "<function=f>\n<parameter=a>\n1\n</function>"),  # no </parameter>
    ("xml", "<function=two words></function>"),
    ("kv", 'get_weather {"city": "Paris"}'),  # arguments on the name's line
    ("kv", "f\n<arg_key>a</arg_key>"),  # a key without its value
    ("kv", "f\n<arg_key>a</arg_key><arg_value>1</arg_value> trailing"),
    ("mistral", 'f[ARGS]"not an object"'),
    ("mistral", 'f[ARGS]{"a": 1} trailing'),
    ("mistral", 'f{"a": 1}'),
    ("pythonic", "f(1, 2)"),  # positional arguments
    ("pythonic", "f(a=b)"),  # a variable, not a literal
    ("pythonic", "f(a={1, 2})"),  # a set
    ("pythonic", "f(a=1"),
    ("pythonic", "f() g()"),  # two calls need a line break or ";" between them
    ("gemma4", 'call:f{a:<|"|>unterminated}'),
    ("gemma4", "call:f{a:1,}"),
    ("gemma4", "call:f{a:1} junk"),
    ("gemma4", "call: f{a:1}"),
    ("function_gemma", 'call:f{a:<|"|>x<|"|>}'),  # Gemma 4's delimiter is not FunctionGemma's
    ("harmony", '<|channel|>commentary<|message|>{"a": 1}'),  # no recipient
    ("harmony", '<|channel|>commentary to=assistant<|message|>{"a": 1}'),
    ("harmony", '<|channel|>commentary to=functions.f json<|message|>not json'),
    ("harmony", 'to=functions.f<|message|>{"a": 1}'),  # no channel
]


@pytest.mark.parametrize("fmt,text", MALFORMED)
def test_grammar_rejects_malformed_blocks(fmt, text):
    with pytest.raises(BlockMismatch, match=fmt):
        parse_block(fmt, text, TOOLS)


def test_every_format_has_a_compiled_lalr_grammar():
    from tinytitan.engine.families.bodies.make import make_body
    from tinytitan.engine.families.markup import Markup

    assert grammar.grammar_dir() == Path(__file__).resolve().parents[1] / "grammars"
    for fmt in grammar.FORMATS:
        parser = grammar.load(fmt)
        assert parser.options.parser == "lalr"
        assert grammar.load(fmt) is parser  # compiled once
    families = {f.markup.body for f in FAMILIES.values() if f.markup is not None}
    assert families | {"harmony"} == set(grammar.FORMATS)
    for kind in families:
        assert make_body(Markup(body=kind), None).format == kind
    assert make_body(Markup(body="xml"), None, tentative=True).format == "json"
    files = {p.name for p in grammar.grammar_dir().glob("*.lark")}
    assert files == set(grammar.FORMATS.values()) | {"json_value.lark"}


def test_check_is_cheap():
    text = ("\n<function=write_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n<parameter=content>\n"
            + "x = 1\n" * 200 + "</parameter>\n</function>\n")
    parse_block("xml", text, TOOLS)
    t = time.perf_counter()
    for _ in range(50):
        parse_block("xml", text, TOOLS)
    assert (time.perf_counter() - t) / 50 < 0.02


# ---------------------------------------------------------------------------------------------------------
# A disagreement is logged, never raised, and changes no event
# ---------------------------------------------------------------------------------------------------------

def _feed(family, raw, step=2):
    p = FAMILIES[family].parser(False, {}, TOOLS)
    events = []
    for i in range(0, len(raw), step):
        events += p.feed(raw[i:i + step])[0]
    return events + p.finish()


def test_grammar_rejecting_streamed_markup_is_logged(monkeypatch, caplog):
    raw = '<tool_call>\n{"name": "get_weather", "arguments": {city: "Paris"}}\n</tool_call>'
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = _feed("qwen", raw)
    assert _streamed(events) == [("get_weather", '{city: "Paris"}')]  # what the client already has
    warnings = _grammar_warnings(caplog)
    assert len(warnings) == 1 and warnings[0].startswith("json tool-call grammar rejects")
    monkeypatch.setattr(grammar, "check_block", lambda *a, **k: True)
    assert ff.summary(_feed("qwen", raw)) == ff.summary(events)


@pytest.mark.parametrize("family,fmt,raw", [
    ("qwen", "json", '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'),
    ("gpt_oss", "harmony", '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>'),
    ("glm", "kv", "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"),
])
def test_disagreement_is_logged_not_raised(monkeypatch, caplog, family, fmt, raw):
    before = ff.summary(_feed(family, raw))
    monkeypatch.setattr(grammar, "parse_block", lambda f, text, tools=None: [("f", '{"a": 2}')])
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        after = ff.summary(_feed(family, raw))
    assert after == before
    warnings = _grammar_warnings(caplog)
    assert any(m.startswith(f"{fmt} tool-call grammar and streaming decoder disagree") for m in warnings)

    def boom(*a, **k):
        raise RuntimeError("broken")

    caplog.clear()
    monkeypatch.setattr(grammar, "parse_block", boom)
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        assert ff.summary(_feed(family, raw)) == before
    assert any(m.startswith(f"{fmt} tool-call grammar check failed") for m in _grammar_warnings(caplog))


def test_grammar_accepting_what_the_decoder_returned_as_text_is_logged(monkeypatch, caplog):
    raw = "Sure.<tool_call>gibberish</tool_call>"
    monkeypatch.setattr(grammar, "parse_block", lambda f, text, tools=None: [("gibberish", "{}")])
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = _feed("qwen", raw)
    assert not _streamed(events)
    assert any("disagree" in m for m in _grammar_warnings(caplog))


def test_cut_short_block_is_not_checked(root, blocks):
    fc.run(root, "qwen", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par')
    assert blocks == []


# ---------------------------------------------------------------------------------------------------------
# A broken grammar fails at load, naming its file
# ---------------------------------------------------------------------------------------------------------

def test_grammar_syntax_error_fails_at_load_naming_the_file(tmp_path):
    shutil.copytree(grammar.grammar_dir(), tmp_path / "g")
    bad = tmp_path / "g" / "json.lark"
    bad.write_text(bad.read_text().replace('call: "{" member', 'call: "{" member (', 1))
    with pytest.raises(GrammarError, match=r"json\.lark"):
        grammar.load("json", tmp_path / "g")
    (tmp_path / "g" / "kv.lark").write_text("start: NAME\n")  # an undefined terminal
    with pytest.raises(GrammarError, match=r"kv\.lark"):
        grammar.load("kv", tmp_path / "g")
    (tmp_path / "g" / "xml.lark").unlink()
    with pytest.raises(GrammarError, match=r"xml\.lark"):
        grammar.load("xml", tmp_path / "g")
    with pytest.raises(GrammarError, match="no grammar"):
        grammar.load("yaml")


def test_grammars_found_in_an_installed_wheel(tmp_path):
    pkg = tmp_path / "site-packages" / "tinytitan"
    shutil.copytree(grammar.grammar_dir(), pkg / "_grammars")
    assert grammar.grammar_dir(pkg) == pkg / "_grammars"
    grammar.load.cache_clear()
    try:
        for fmt in grammar.FORMATS:  # relative %imports resolve inside the installed copy too
            grammar.load(fmt, pkg / "_grammars")
    finally:
        grammar.load.cache_clear()
    with pytest.raises(GrammarError, match="no grammars directory"):
        grammar.grammar_dir(tmp_path / "empty")


def test_a_rejected_block_keeps_its_text_out_of_the_default_log(caplog):
    """A grammar/decoder disagreement is worth a warning, but the block is the model's answer (a call's
    arguments): its text is logged at debug only."""
    import logging

    caplog.set_level(logging.INFO)
    secret = '{"name": "write_file", "arguments": {"content": "password=hunter2"'  # cut short
    assert grammar.check_block("json", secret, [("write_file", '{"content": "password=hunter2"}')]) is False
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "hunter2" not in warning.getMessage() and "rejects a block" in warning.getMessage()
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    grammar.check_block("json", secret, [("write_file", '{"content": "password=hunter2"}')])
    assert any("hunter2" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
