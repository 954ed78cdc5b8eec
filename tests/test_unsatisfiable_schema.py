"""A schema no value satisfies (bounds that cross, an enum its type empties) is the client's 400 in words for a
person, at the place inside the schema where no value can be written, on every protocol: not llguidance's
("Unsatisfiable schema: required property 'n' is unsatisfiable", "(NoExtensionBias)"), and for a strict tool not
the compiled call grammar, kilobytes of server internals the client never wrote, naming only 'tools'."""

from __future__ import annotations

import httpx
import pytest

import anthropic_util
from tinytitan.chat_request import Grammar
from tinytitan.errors import ApiError

CROSSED = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["n"]}
EMPTIED = {"type": "object", "properties": {"s": {"type": "string", "enum": [1, 2]}}, "required": ["s"]}
WHY = {"CROSSED": ("properties.n", "minimum (5) is greater than maximum (1)"),
       "EMPTIED": ("properties.s", "incompatible types")}


@pytest.mark.parametrize("name,schema", [("CROSSED", CROSSED), ("EMPTIED", EMPTIED)])
async def test_an_output_format_no_value_satisfies_is_refused_at_its_place(serve, demo_backend, name, schema):
    inner, why = WHY[name]
    s = await serve(backend=demo_backend)
    model, user = demo_backend.model_id, [{"role": "user", "content": "x"}]
    async with httpx.AsyncClient(timeout=60) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={"model": model, "messages": user, "max_tokens": 9,
            "response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schema}}})
        resp = await c.post(s.url("/v1/responses"), json={"model": model, "input": "x", "max_output_tokens": 9,
            "text": {"format": {"type": "json_schema", "name": "t", "strict": True, "schema": schema}}})
        msg = await c.post(s.url("/v1/messages"), headers=anthropic_util.HEADERS, json={
            "model": model, "max_tokens": 9, "messages": user,
            "output_config": {"format": {"type": "json_schema", "schema": schema}}})
        ollama = await c.post(s.url("/api/chat"), json={"model": model, "stream": False, "messages": user,
                                                        "format": schema})
    for r, at in ((chat, "response_format.json_schema.schema"), (resp, "text.format.schema")):
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == (f"The schema at '{at}.{inner}' cannot be enforced: no value "
                                                f"satisfies this schema: {why}")
        assert r.json()["error"]["param"] == f"{at}.{inner}"
    anthropic_util.assert_envelope(msg, 400, "invalid_request_error")
    assert msg.json()["error"]["message"] == (f"The schema at 'output_config.format.schema.{inner}' cannot be "
                                              f"enforced: no value satisfies this schema: {why}")
    assert ollama.status_code == 400 and ollama.json() == {
        "error": f"The schema at 'format.{inner}' cannot be enforced: no value satisfies this schema: {why}"}


@pytest.mark.parametrize("forced", [False, True], ids=["auto", "forced"])
async def test_a_strict_tool_no_value_satisfies_is_refused_by_name(serve, demo_backend, forced):
    s = await serve(backend=demo_backend)
    model, user = demo_backend.model_id, [{"role": "user", "content": "x"}]
    words = ("tool_choice forces a call to 'f', whose arguments must then match its schema" if forced else
             "'f' is a strict tool, whose calls must then match its schema")
    words += ": no value satisfies this schema at 'tools.f.parameters.properties.s': incompatible types"
    async with httpx.AsyncClient(timeout=60) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={
            "model": model, "messages": user, "max_tokens": 9, "tool_choice": "required" if forced else "auto",
            "tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": EMPTIED}}]})
        resp = await c.post(s.url("/v1/responses"), json={
            "model": model, "input": "x", "max_output_tokens": 9, "tool_choice": "required" if forced else "auto",
            "tools": [{"type": "function", "name": "f", "strict": True, "parameters": EMPTIED}]})
        msg = await c.post(s.url("/v1/messages"), headers=anthropic_util.HEADERS, json={
            "model": model, "max_tokens": 9, "messages": user, "tool_choice": {"type": "any" if forced else "auto"},
            "tools": [{"name": "f", "strict": True, "input_schema": EMPTIED}]})
    for r in (chat, resp):
        assert r.status_code == 400 and r.json()["error"]["message"] == words, r.text
        assert r.json()["error"]["param"] == ("tool_choice" if forced else "tools.f.parameters.properties.s")
    anthropic_util.assert_envelope(msg, 400, "invalid_request_error")
    assert msg.json()["error"]["message"] == words


def test_a_grammar_with_no_way_to_begin_is_said_for_a_person(demo_backend):
    """What the compiler takes and its matcher cannot begin (a root that only refers to itself, past the checks
    that name a reference's cycle): said so, without llguidance's name for it."""
    from tinytitan.engine.structured import compile_grammar

    with pytest.raises(ApiError) as err:
        compile_grammar(Grammar("json_schema", {"anyOf": [{"$ref": "#"}]}, where="response_format"),
                        demo_backend.tokenizer, demo_backend.vocab_size)
    assert err.value.message == ("The schema at 'response_format' cannot be enforced: no value satisfies this "
                                 "schema: the grammar it compiles to admits no output at all")
