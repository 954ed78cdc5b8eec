"""Every tool-call syntax (``families/syntaxes/``) through one contract, on a family that writes it:

- render then decode: past calls as the syntax renders them, fed to the family's streaming parser a few
  characters at a time, come back as the same calls (names, arguments as JSON values), and the checking
  grammar reads the same calls from the completed block;
- decode what the forcing grammar can produce: random documents of the forced-call grammar (a uniformly random
  allowed token at every step, as a random-weight model under the mask) are read back as calls to the allowed
  tools whose arguments validate against their schemas, and the checking grammar agrees with every block;
- a syntax without a forcing grammar refuses a forced call by name.
"""

from __future__ import annotations

import json
import logging
import random

import jsonschema
import pytest

import family_fixtures as ff
from grammar_walk import random_document
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message, Tool
from tinytitan.engine.families import FAMILIES
from tinytitan.engine.families.grammar import parse_block
from tinytitan.engine.families.syntaxes import SYNTAXES
from tinytitan.errors import ApiError

SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                     "days": {"type": "integer", "minimum": 0, "maximum": 9}},
                    "required": ["city"], "additionalProperties": False},
    "write_file": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 10},
                                                    "content": {"type": "string", "maxLength": 20}},
                   "required": ["path", "content"], "additionalProperties": False},
}
TOOLS = tuple(Tool(n, parameters=s) for n, s in SCHEMAS.items())
# block closers and quotes inside string values: each syntax keeps them as part of the value (a verbatim value
# cannot hold its own closing tag: the tag syntaxes' forcing grammars never produce one)
CALLS = [("get_weather", {"city": "Paris", "days": 3}),
         ("write_file", {"path": "a.md", "content": 'x</tool_call>"}\n]<|tool_call_end|>```'
                                                    '<｜tool▁call▁end｜></minimax:tool_call>'})]


def family_of(syntax: str):
    """A family that writes ``syntax``, one with a tokenizer fixture where there is one."""
    rows = [f for f in FAMILIES.values() if f.syntax.name == syntax]
    return next((f for f in rows if f.name in ff.SPECS), rows[0])


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("syntax-contract")


@pytest.fixture
def checked(monkeypatch):
    """Every block the parsers check against the grammar: (format, text, streamed calls)."""
    from tinytitan.engine.families import grammar

    seen, real = [], grammar.check_block

    def spy(fmt, text, streamed, tools=None):
        seen.append((fmt, text, list(streamed)))
        return real(fmt, text, streamed, tools)

    monkeypatch.setattr(grammar, "check_block", spy)
    return seen


def decode(family, raw: str, step: int = 3) -> list:
    parser = family.parser(False, {}, SCHEMAS)
    events = []
    for i in range(0, len(raw), step):
        events += parser.feed(raw[i:i + step])[0]
    return events + parser.finish()


def calls_of(events) -> list[tuple[str, object]]:
    names = {e.index: e.name for e in events if isinstance(e, ev.ToolCallStarted)}
    return [(names[e.index], json.loads(e.arguments)) for e in events if isinstance(e, ev.ToolCallDone) and e.complete]


def test_every_family_names_a_known_syntax():
    assert {f.syntax.name for f in FAMILIES.values()} <= set(SYNTAXES)


@pytest.mark.parametrize("name", sorted(SYNTAXES))
@pytest.mark.parametrize("step", [1, 3, 7])
def test_render_then_decode_round_trips(name, step, checked, caplog):
    family = family_of(name)
    raw = family.render_calls(CALLS)
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = decode(family, raw, step)
    assert calls_of(events) == CALLS, raw
    assert not [e for e in events if isinstance(e, ev.TextDelta) and e.text.strip()], raw
    for e in events:  # the arguments streamed are exactly the arguments
        if isinstance(e, ev.ToolCallDone):
            assert "".join(d.text for d in events if isinstance(d, ev.ToolCallArgsDelta) and d.index == e.index) \
                == e.arguments
    # the checking grammar read every completed block, and read the same calls
    assert [c for *_, streamed in checked for c in streamed] and not caplog.records, caplog.text
    for fmt, text, streamed in checked:
        assert [(n, json.loads(a)) for n, a in parse_block(fmt, text, SCHEMAS)] == \
            [(n, json.loads(a)) for n, a in streamed]


@pytest.mark.parametrize("name", sorted(n for n, s in SYNTAXES.items() if s.blocks is not None))
@pytest.mark.parametrize("parallel", [True, False])
def test_decode_what_the_forcing_grammar_produces(root, name, parallel, checked, caplog):
    family = family_of(name)
    assert family.name in ff.SPECS, f"a syntax with a forcing grammar needs a family with a fixture ({name})"
    backend = ff.backend(family.name, root)
    req = ChatRequest("m", (Message("user", "Go."),), TOOLS, tool_choice="required", parallel_tool_calls=parallel)
    compiled = backend.prepare(req).grammar
    rng, hf, seen, counts = random.Random(name + str(parallel)), backend.tokenizer, set(), []
    single = parallel is False or family.one_call or name == "harmony"
    for _ in range(10):
        raw = hf.decode(random_document(compiled, rng, set(backend.tokenizer.eos_token_ids)), skip_special_tokens=False)
        with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
            events = ff.generate(ff.backend(family.name, root, [raw]), req.with_(tool_choice="auto", reasoning=False))
        calls = calls_of(events)
        assert calls, raw
        for call_name, arguments in calls:
            jsonschema.validate(arguments, SCHEMAS[call_name])
            seen.add(call_name)
        counts.append(len(calls))
    assert seen == set(SCHEMAS)
    assert (max(counts) == 1) if single else (max(counts) > 1)
    assert checked and not [r for r in caplog.records if "grammar" in r.getMessage()], caplog.text


@pytest.mark.parametrize("name", sorted(n for n, s in SYNTAXES.items() if s.blocks is None))
def test_a_syntax_without_a_forcing_grammar_refuses_by_name(name):
    from tinytitan.engine.structured.tool_calls import forced_call_grammar

    family = family_of(name)
    with pytest.raises(ApiError) as err:
        forced_call_grammar(family, list(TOOLS), True, {})
    assert err.value.param == "tool_choice" and f"('{family.name}')" in err.value.message


# a call as the family's template writes it (and so its models): held by every grammar a request can bring
LAYOUT_SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"], "additionalProperties": False},
    "write_file": {"type": "object", "properties": {"path": {"type": "string"},
                                                    "opts": {"type": "object", "properties": {
                                                        "mode": {"type": "string"},
                                                        "n": {"type": "array", "items": {"type": "integer"}}}}},
                   "required": ["path"], "additionalProperties": False},
}
LAYOUT_CALLS = [("get_weather", {"city": "Paris", "days": 3}),
                ("write_file", {"path": "a.md", "opts": {"mode": "w", "n": [1, 2]}})]
FORCING = sorted(n for n, s in SYNTAXES.items() if s.blocks is not None)
# the fixture families masked under tool_choice auto too (their markers are tokens of their vocabulary)
AUTO_MASKED = {"deepseek_r1", "deepseek_v3", "glm", "kimi_k2", "minimax_m2", "mistral", "qwen", "qwen3_coder"}


def template_output(backend, tools, calls) -> str:
    """What the family's own chat template writes for an assistant turn making ``calls``."""
    from tinytitan.chat_request import ToolCall

    made = tuple(ToolCall(f"call{i}", n, json.dumps(a)) for i, (n, a) in enumerate(calls))
    user = Message("user", "Go.")
    req = ChatRequest("m", (user,), tools, reasoning=False)
    results = tuple(Message("tool", "ok", tool_call_id=c.id, name=c.name) for c in made)
    return backend.render(req.with_(messages=(user, Message("assistant", "", tool_calls=made), *results)))


@pytest.mark.parametrize("name", FORCING)
def test_the_syntax_writes_json_in_its_templates_layout(root, name):
    """The layout a syntax renders calls in (and forces them in) is its template's: each JSON value the
    rendering holds, spelt as the syntax spells it, is in the template's own rendering of the same calls."""
    family = family_of(name)
    backend = ff.backend(family.name, root)
    tools = tuple(Tool(n, parameters=s) for n, s in LAYOUT_SCHEMAS.items())
    rendered = template_output(backend, tools, LAYOUT_CALLS)
    ours = family.render_calls(LAYOUT_CALLS)
    nested = json.dumps(LAYOUT_CALLS[1][1]["opts"])  # {"mode": "w", "n": [1, 2]}
    assert nested in rendered and nested in ours, (rendered, ours)


def _cases(family):
    """(label, request fields, how many calls the turn may make) for every grammar a call can be held to."""
    strict = tuple(Tool(n, parameters=s, strict=True) for n, s in LAYOUT_SCHEMAS.items())
    plain = tuple(Tool(n, parameters=s) for n, s in LAYOUT_SCHEMAS.items())
    single = family.one_call or family.syntax.name == "harmony"
    many = 1 if single else 2
    return [("forced", dict(tools=plain, tool_choice="required"), many),
            ("forced, one call", dict(tools=plain, tool_choice="required", parallel_tool_calls=False), 1),
            ("strict tools", dict(tools=strict), many),
            ("parallel_tool_calls false", dict(tools=plain, parallel_tool_calls=False), 1),
            ("max_tool_calls 2", dict(tools=plain, max_tool_calls=2), many),
            ("strict, one call", dict(tools=strict, parallel_tool_calls=False), 1)]


@pytest.mark.parametrize("family_name", sorted(f.name for f in FAMILIES.values()
                                              if f.syntax.blocks is not None and f.name in ff.SPECS))
def test_a_call_in_the_templates_layout_fits_every_grammar(root, family_name):
    """Forced tool choice, strict tools, a call limit: each grammar admits the calls exactly as the syntax
    renders them (its template's layout), and the scripted answer reads back as those calls."""
    family = FAMILIES[family_name]
    grammars = []
    for label, fields, n in _cases(family):
        calls = LAYOUT_CALLS[:n]
        backend = ff.backend(family.name, root)
        req = ChatRequest("m", (Message("user", "Go."),), reasoning=False, **fields)
        opened = family.starts_in_reasoning(backend.render(req))  # a template that always thinks: closed first
        raw = (family.markup.think_close + "\n\n" if opened else "") + family.render_calls(calls)
        backend = ff.backend(family.name, root, [raw])
        if backend.prepare(req).grammar is not None:
            grammars.append(label)
        events = ff.generate(backend, req)  # ends Failed ("does not fit") if a grammar refuses the layout
        assert calls_of(events) == calls, (label, raw)
    # the forced calls always have a grammar; under auto, where the family's markers are tokens (AUTO_MASKED)
    assert grammars == [c[0] for c in _cases(family)][:6 if family_name in AUTO_MASKED else 2], grammars


def test_a_call_in_another_layout_still_fails_clearly(root):
    """Where the family's layout is fixed (Qwen's ``tojson`` spacing), compact JSON is not what the mask lets
    its models write: the script does not fit, and the generation fails saying so (the row's failure, as any
    forward's)."""
    from tinytitan.events import Failed

    compact = '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'
    backend = ff.backend("qwen", root, [compact])
    req = ChatRequest("m", (Message("user", "Go."),), tuple(Tool(n, parameters=s) for n, s in LAYOUT_SCHEMAS.items()),
                      tool_choice="required", reasoning=False)
    events = ff.generate(backend, req)
    assert isinstance(events[-1], Failed) and "does not fit the request's grammar" in events[-1].message
    assert not [e for e in events if type(e).__name__.startswith("ToolCall")]
