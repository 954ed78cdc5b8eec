"""The spec tables themselves: loading errors name file/path/problem; every machine table is total
(each (state, TokenEvent) pair either has a row or raises); a YAML-only edit changes the server."""

from __future__ import annotations

import shutil

import httpx
import pytest
import yaml

from tinytitan.events import (EVENT_TYPES, Failed, Finished, KeepAlive, PromptLogprobs, ReasoningDelta, Started,
                              TextDelta, TokenLogprob, ToolCallArgsDelta, ToolCallDone, ToolCallStarted, Usage)
from tinytitan.speclang import SpecError, load_protocol, spec_dir
from tinytitan.speclang.load import compile_spec, read_spec
from tinytitan.speclang.machine import Machine, MachineError
from tinytitan.speclang import paths, template

SAMPLES = {
    "Started": Started(5, 0), "PromptLogprobs": PromptLogprobs("p", (TokenLogprob("p", (112,), None),)),
    "ReasoningDelta": ReasoningDelta("r"), "TextDelta": TextDelta("t"),
    "ToolCallStarted": ToolCallStarted(0, "call_1", "f"), "ToolCallArgsDelta": ToolCallArgsDelta(0, "{}"),
    "ToolCallDone": ToolCallDone(0, "{}"), "KeepAlive": KeepAlive(1.0),
    "Finished": Finished("stop", Usage(5, 0, 1, 0)), "Failed": Failed("boom"),
}
SPECS = sorted(p.stem for p in spec_dir().glob("*.yaml"))


def chat_raw():
    return read_spec(spec_dir() / "openai_chat.yaml")  # the file as it loads (errors.extends resolved)


@pytest.mark.parametrize("mutate, where, problem", [
    (lambda r: r["stream"]["states"]["open"].update({"TextDeltaa": {"emit": ["content"]}}),
     "stream.states.open.TextDeltaa", "not a TokenEvent"),
    (lambda r: r["stream"]["states"]["open"]["TextDelta"].update({"emit": ["contnet"]}),
     "stream.states.open.TextDelta.emit[0]", "no event named 'contnet'"),
    (lambda r: r["stream"]["states"]["open"]["TextDelta"].update({"next": "nowhere"}),
     "stream.states.open.TextDelta.next", "no state named 'nowhere'"),
    (lambda r: r["request"]["fields"]["temperature"].update({"type": "float"}),
     "request.fields.temperature.type", "is not valid"),
    (lambda r: r["request"]["refuse"].append({"field": "bogus", "when": {"present": True}, "message": "x"}),
     "request.refuse[", "'bogus' is not a declared request field"),
    (lambda r: r["request"].update({"lowercase": ["mesages[].role"]}), "request.lowercase[0]",
     "'mesages[].role' is not in a declared request field"),
    (lambda r: r.pop("errors"), "<top>", "'errors' is a required property"),
    (lambda r: r["request"]["fields"]["seed"].update({"to": "sed"}), "request.fields.seed.to",
     "'sed' is not a ChatRequest field"),
    # template variables are checked when the spec loads, not when a request first renders them
    (lambda r: r["stream"]["events"]["content"]["data"]["choices"][0]["delta"].update({"content": "$ev.txt"}),
     "stream.events.content", "TextDelta (which emits it) has no 'txt'"),
    (lambda r: r["stream"]["events"]["role"]["data"].update({"x": "${nothing.here}"}),
     "stream.events.role", "uses $nothing.here, which no context provides"),
    (lambda r: r["stream"]["events"]["content"]["data"].update({"x": "$error.message"}),
     "stream.events.content", "only a Failed event provides"),
    (lambda r: r["stream"]["events"]["finish"]["data"]["choices"][0].update({"finish_reason": "$ev.reason|nomap"}),
     "stream.events.finish", "uses map 'nomap'"),
    # a negated condition ("!name": emitted where the value is not set) is checked as its name
    (lambda r: r["stream"]["events"]["finish"].update({"when": "!nmaed_tool"}),
     "stream.events.finish", "uses $nmaed_tool, which no context provides"),
])
def test_bad_spec_names_file_path_problem(mutate, where, problem):
    raw = chat_raw()
    mutate(raw)
    with pytest.raises(SpecError) as e:
        compile_spec(raw, "openai_chat.yaml")
    msg = str(e.value)
    assert msg.startswith("openai_chat.yaml: ")
    assert where in msg and problem in msg, msg


def test_invalid_yaml_file(tmp_path):
    (tmp_path / "broken.yaml").write_text("protocol: [unclosed\n")
    with pytest.raises(SpecError, match=r"^broken.yaml: not valid YAML"):
        load_protocol(tmp_path / "broken.yaml")


@pytest.mark.parametrize("name", SPECS)
def test_every_spec_loads(name):
    load_protocol(name)


def _protocol(name):
    from tinytitan.protocols.registry import all_protocols

    return next(p for p in all_protocols() if p.name == name)


@pytest.mark.parametrize("name", [n for n in SPECS if load_protocol(n).stream])
def test_machine_tables_are_total(name):
    """Every (state, TokenEvent) pair: a row, or MachineError. Machines are built the way the server
    builds them (the protocol's own context and hooks)."""
    from tinytitan.speclang.validate import Validated

    proto = _protocol(name)
    states = proto.spec.stream["states"]
    for state in states:
        for ev_name, ev in SAMPLES.items():
            m = proto.machine(Validated(body={"stream_options": {"include_usage": True}}), "m", True)
            m.state = state
            if ev_name in states[state]:
                try:
                    m.feed(ev)
                except MachineError:
                    raise
                except (KeyError, AttributeError, TypeError, IndexError, template.TemplateError):
                    # a hook or template that needs earlier bookkeeping (this state was entered directly);
                    # the row exists, which is what this test checks
                    pass
            else:
                with pytest.raises(MachineError, match=f"state '{state}' does not accept {ev_name}"):
                    m.feed(ev)
    assert set(SAMPLES) == set(EVENT_TYPES)


def test_chat_machine_walk():
    from tinytitan.protocols.openai_chat import OpenAIChat

    spec = load_protocol("openai_chat")
    m = Machine(spec, {"req": {"stream_options": {"include_usage": True}}, "id": "c1", "created": 1, "model": "m"},
                OpenAIChat().machine_hooks(), state=OpenAIChat().machine_state())
    out = []
    for ev in [Started(3), ReasoningDelta("hm"), TextDelta("hi"), ToolCallStarted(0, "call_a", "f"),
               ToolCallArgsDelta(0, '{"a"'), ToolCallArgsDelta(0, ":1}"), ToolCallDone(0, '{"a":1}'),
               Finished("tool_calls", Usage(3, 1, 7, 2))]:
        out.extend(m.feed(ev))
    assert m.done and m.terminal.data == "[DONE]"
    deltas = [w.data["choices"][0]["delta"] if w.data["choices"] else None for w in out]
    assert deltas[1] == {"reasoning_content": "hm"} and deltas[2] == {"content": "hi"}
    assert out[-2].data["choices"][0]["finish_reason"] == "tool_calls"
    assert out[-1].data["usage"] == {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10,
                                     "prompt_tokens_details": {"cached_tokens": 1},
                                     "completion_tokens_details": {"reasoning_tokens": 2}}
    with pytest.raises(MachineError):
        m.feed(TextDelta("late"))


def test_template_rules():
    ctx = {"a": {"b": [1, 2]}, "n": None, "f": lambda: "called"}
    assert template.render({"x": "$a.b", "y?": "$n", "z": "id-${a.b[1]}", "w": "$$5", "c": "$f"}, ctx) == \
        {"x": [1, 2], "z": "id-2", "w": "$5", "c": "called"}
    with pytest.raises(template.TemplateError):
        template.render("$missing", ctx)


def test_a_path_step_may_take_only_the_elements_of_one_type():
    # a refusal of one block type's field (a document's source) leaves the same field of another (an image's) alone
    doc = {"messages": [{"content": [{"type": "image", "source": {"type": "file"}}, "text",
                                     {"type": "document", "source": {"type": "file"}}]}]}
    assert paths.steps("messages[].content[type=document].source") == \
        ["messages", None, "content", ("type", "document"), "source"]
    assert paths.reach(doc, "messages[].content[type=document].source.type") == \
        [(("messages", 0, "content", 2, "source", "type"), "file")]
    assert len(paths.reach(doc, "messages[].content[].source.type")) == 2
    assert paths.reach(doc, "messages[].content[type=audio].source.type") == []


async def test_yaml_only_edit_changes_the_server(serve, tmp_path):
    """A maintainer adds a refusal, an accepted-and-ignored field and a limit on a nested field in YAML; no
    Python is edited."""
    for p in spec_dir().glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)
    raw = yaml.safe_load((tmp_path / "openai_chat.yaml").read_text())
    raw["request"]["fields"]["x_trace_id"] = {"type": "string", "ignore": True}
    raw["request"]["refuse"].append({"field": "seed", "when": {"gt": 1000}, "code": "seed_too_big",
                                     "message": "'seed' {value} is larger than this server allows"})
    # a nested field: a message's participant name gets a length limit inside the messages schema
    raw["request"]["fields"]["messages"]["schema"]["items"]["properties"]["name"]["maxLength"] = 8
    (tmp_path / "openai_chat.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    body = {"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}]}
    stock = await serve(["ok"])
    edited = await serve(["ok"], spec_dir=tmp_path)
    async with httpx.AsyncClient() as c:
        url = "/v1/chat/completions"
        assert (await c.post(stock.url(url), json={**body, "x_trace_id": "t"})).status_code == 400
        assert (await c.post(edited.url(url), json={**body, "x_trace_id": "t"})).status_code == 200
        assert (await c.post(stock.url(url), json={**body, "seed": 5000})).status_code == 200
        r = await c.post(edited.url(url), json={**body, "seed": 5000})
        assert r.status_code == 400
        assert r.json()["error"] == {"message": "'seed' 5000 is larger than this server allows",
                                     "type": "invalid_request_error", "param": "seed", "code": "seed_too_big"}
        named = {**body, "messages": [{"role": "system", "content": "s"},
                                      {"role": "user", "content": "hi", "name": "a-very-long-name"}]}
        assert (await c.post(stock.url(url), json=named)).status_code == 200
        r = await c.post(edited.url(url), json=named)
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].name"


# an internal error kind, as each protocol's errors.kinds words it inside a stream
IN_STREAM = {
    "openai_chat": lambda d: (d["error"]["type"], d["error"]["code"]),
    "anthropic_messages": lambda d: d["error"]["type"],
    "openai_responses": lambda d: d["response"]["error"]["code"],
    "ollama": lambda d: d["error"],
}


@pytest.mark.parametrize("name,kind,expected", [
    ("openai_chat", "overloaded", ("rate_limit_exceeded", "queue_full")),
    ("openai_chat", "server_error", ("server_error", None)),  # the API's own mid-stream error has code null
    ("anthropic_messages", "overloaded", "overloaded_error"),
    ("anthropic_messages", "server_error", "api_error"),
    ("openai_responses", "overloaded", "rate_limit_exceeded"),
    ("openai_responses", "invalid_request", "invalid_prompt"),
    ("openai_responses", "server_error", "server_error"),
    ("ollama", "overloaded", "busy"),
])
def test_in_stream_errors_are_worded_by_errors_kinds(name, kind, expected):
    """A failure after the stream opened goes out in the protocol's own words for its kind: the internal
    kind name (``overloaded``) never reaches the wire."""
    from tinytitan.speclang.validate import Validated

    proto = _protocol(name)
    m = proto.machine(Validated(body={"model": "m"}), "m", True)
    m.feed(Started(3))
    (wire,) = [w for w in m.feed(Failed("busy", type=kind)) if w.event in (None, "error", "response.failed")]
    assert IN_STREAM[name](wire.data) == expected
    assert "overloaded" not in str(wire.data) or name == "anthropic_messages"


def test_errors_extends_declares_the_table_once(tmp_path):
    """``errors.extends`` takes another file's envelope and kinds; the file's own kinds win; no cycles."""
    shared = load_protocol("shared")
    chat = load_protocol("openai_chat")
    assert chat.error_envelope == shared.error_envelope and chat.error_kinds == shared.error_kinds
    assert not chat.error_by_header  # only the envelope and the kinds are inherited
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"protocol": "base", "errors": {
        "envelope": {"error": "$message"}, "kinds": {"server_error": {"status": 500, "type": "x"},
                                                     "overloaded": {"status": 429, "type": "busy"}}}}))
    (tmp_path / "child.yaml").write_text(yaml.safe_dump({"protocol": "child", "errors": {
        "extends": "base", "kinds": {"overloaded": {"status": 503, "type": "busy"}}}}))
    child = load_protocol("child", tmp_path)
    assert child.error_kind("overloaded").status == 503 and child.error_kind("server_error").type == "x"
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"protocol": "base", "errors": {"extends": "child"}}))
    with pytest.raises(SpecError, match="errors.extends"):
        load_protocol("child", tmp_path)


def test_machine_state_is_typed_and_the_spec_is_checked_against_it(tmp_path):
    """Each protocol's bookkeeping is a dataclass (named, typed fields, not a dict); a template naming a
    field the state does not have fails when the protocol starts."""
    import dataclasses

    from tinytitan.protocols.registry import all_protocols

    for proto in all_protocols():
        if proto.spec.stream and any(row.get("do") for t in proto.spec.stream["states"].values() for row in t.values()):
            assert dataclasses.is_dataclass(proto.machine_state()), proto.name
    for p in spec_dir().glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)
    raw = yaml.safe_load((tmp_path / "ollama.yaml").read_text())
    raw["stream"]["events"]["done"]["data"]["eval_duration"] = "$vars.eval_durration"
    (tmp_path / "ollama.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    from tinytitan.protocols.ollama import Ollama

    with pytest.raises(ValueError, match=r"vars \['eval_durration'\], which OllamaState does not have"):
        Ollama(tmp_path)


@pytest.mark.parametrize("what, method", [("route handlers", "handlers"), ("request hooks", "request_hooks"),
                                          ("machine hooks", "machine_hooks")])
def test_a_name_the_spec_gives_to_code_the_module_lacks_fails_at_start(what, method):
    """A route handler, request hook or machine hook that the spec names and the protocol module does not provide
    is refused when the module starts, in one wording: the file, which kind of name, the names missing."""
    from tinytitan.protocols.openai_chat import OpenAIChat

    dropped = min(getattr(OpenAIChat(), method)())

    class Lacking(OpenAIChat):
        pass

    setattr(Lacking, method, lambda self: {k: v for k, v in getattr(OpenAIChat, method)(self).items() if k != dropped})
    with pytest.raises(ValueError) as refused:
        Lacking()
    assert str(refused.value) == f"openai_chat.yaml: {what} not provided by the protocol module: ['{dropped}']"


def test_the_templates_are_read_once_and_the_module_context_checked_once(tmp_path):
    """The $paths a spec's stream templates use are read at load and kept on the spec, which is what the
    protocol checks its state against; a template that names a $vars field in its ``when`` or its ``event``
    name is held to the state like one in its data. A module whose extra_context supplies a name the spec
    does not declare is refused on its first machine (and on every one after it: a refusal is not a check
    passed)."""
    from tinytitan.protocols.ollama import Ollama
    from tinytitan.protocols.openai_chat import OpenAIChat

    spec = load_protocol("ollama")
    assert spec.lookups["done"] >= {"vars.eval_duration", "vars.total_duration"}
    assert {"eval_duration", "total_duration", "load_duration"} <= spec.vars_used
    for p in spec_dir().glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)
    raw = yaml.safe_load((tmp_path / "ollama.yaml").read_text())
    raw["stream"]["events"]["done"]["when"] = "vars.finishd"
    (tmp_path / "ollama.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ValueError, match=r"vars \['finishd'\], which OllamaState does not have"):
        Ollama(tmp_path)

    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'

    class Undeclared(OpenAIChat):
        def extra_context(self, v):
            return {**super().extra_context(v), "tool_count": len(v.args.get("tools", ()))}

    proto = Undeclared()
    for _ in range(2):
        with pytest.raises(ValueError, match=r"extra_context supplies \['tool_count'\], not in stream.computed"):
            proto.machine(proto.validate(body), "m", stream=True)
    assert OpenAIChat().machine(proto.validate(body), "m", stream=True).context["custom_tools"] == []


def test_an_in_stream_error_carries_its_own_code():
    """A failure with a code of its own (a broken group's) says it in band as a folded answer's 503 does."""
    from tinytitan.speclang.validate import Validated

    for name in ("openai_chat", "openai_completions"):
        proto = _protocol(name)
        m = proto.machine(Validated(body={"model": "m", "prompt": "x"}), "m", True)
        m.feed(Started(3))
        (wire,) = [w for w in m.feed(Failed("gone", type="unavailable", code="group_broken"))
                   if isinstance(w.data, dict) and "error" in w.data]
        assert (wire.data["error"]["type"], wire.data["error"]["code"]) == ("server_error", "group_broken")
