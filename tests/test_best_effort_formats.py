"""A format that is not strict whose schema the grammar compiler refuses is served, held to as much of the schema as
compiles; a strict one is still refused by name.

A pydantic model whose password field says ``pattern=r"^(?=.*[0-9]).{4,}$"``, or whose union is a ``oneOf`` the
compiler cannot prove exclusive, reached this server through LangChain's ``with_structured_output`` (no
``strict``), Ollama's ``format`` or Chat's ``json_schema`` without ``strict`` and was a 400, though the format
asked for best effort (OpenAI holds it to no schema; Ollama's schema-to-grammar skips what it cannot express).
The demo model has random weights: whatever validates, the grammar made valid.
"""

from __future__ import annotations

import json
import logging

import httpx
import jsonschema
import ollama
import openai
import pytest

import anthropic_util
from responses_helpers import client as responses_client
from chat_helpers import client as chat_client
from tinytitan.engine.structured import best_effort as best_effort_module
from tinytitan.engine.structured.best_effort import compilable

# a look-around the compiler cannot read, and a oneOf whose branches overlap (a short string is both)
SIGNUP = {"type": "object", "properties": {
    "password": {"type": "string", "pattern": "^(?=.*[0-9]).{4,}$", "minLength": 4, "maxLength": 12},
    "contact": {"oneOf": [{"type": "string", "maxLength": 8}, {"type": "string", "minLength": 3, "maxLength": 10}]}},
    "required": ["password", "contact"], "additionalProperties": False}
LOOSE_SIGNUP = {"type": "object", "properties": {
    "password": {"type": "string", "minLength": 4, "maxLength": 12},
    "contact": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "string", "minLength": 3, "maxLength": 10}]}},
    "required": ["password", "contact"], "additionalProperties": False}
USER = [{"role": "user", "content": "Sign me up."}]
CAP = 120


def chat_format(schema: dict, **strict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "signup", "schema": schema, **strict}}


def responses_format(schema: dict, **strict) -> dict:
    return {"type": "json_schema", "name": "signup", "schema": schema, **strict}


def holds(text: str) -> dict:
    doc = json.loads(text)
    jsonschema.validate(doc, LOOSE_SIGNUP)
    return doc


@pytest.mark.parametrize("schema,loose,said", [
    (SIGNUP, LOOSE_SIGNUP, ["s.properties.contact.oneOf read as anyOf", "s.properties.password.pattern dropped"]),
    ({"type": "string", "pattern": "^(a)\\1$", "maxLength": 4}, {"type": "string", "maxLength": 4}, ["s.pattern"]),
    ({"type": "string", "pattern": "\\bword\\b"}, {"type": "string"}, ["s.pattern"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "maxProperties": 1},
     {"type": "object", "properties": {"a": {"type": "integer"}}}, ["s.maxProperties"]),
    ({"type": "object", "properties": {"next": {"$ref": "#", "minProperties": 1}}},
     {"type": "object", "properties": {"next": {"$ref": "#"}}}, ["s.properties.next.minProperties"]),
    ({"type": "number", "multipleOf": 1e-19, "maximum": 3}, {"type": "number", "maximum": 3}, ["s.multipleOf"]),
    ({"type": "array", "items": {"type": "number", "minimum": 1e19, "maximum": 1e20}},
     {"type": "array", "items": {"type": "number"}}, ["s.items.minimum", "s.items.maximum"]),
    ({"type": "array", "items": {"type": "string", "format": "uuid", "minLength": 100000000000000000000}},
     {"type": "array"}, ["its type"]),
    ({"type": "string", "pattern": "^[a-z]+$"}, {"type": "string", "pattern": "^[a-z]+$"}, []),  # compiles: as sent
    # no value can match it: nothing to loosen to, the compiler's refusal stands
    ({"type": "integer", "minimum": 5, "maximum": 1}, {"type": "integer", "minimum": 5, "maximum": 1}, []),
])
def test_each_step_leaves_out_only_what_the_compiler_cannot_take(schema, loose, said):
    out, notes = compilable(schema, "s")
    assert out == loose
    assert len(notes) == len(said) and all(any(s in n for n in notes) for s in said), notes


async def test_chat_serves_it_and_holds_the_answer_to_the_rest(serve, demo_backend):
    s = await serve(backend=demo_backend)
    r = await chat_client(s).chat.completions.create(
        model=demo_backend.model_id, messages=USER, max_tokens=CAP, temperature=0, response_format=chat_format(SIGNUP))
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    holds(r.choices[0].message.content)
    stream = await chat_client(s).chat.completions.create(
        model=demo_backend.model_id, messages=USER, max_tokens=CAP, temperature=1, seed=4, stream=True,
        response_format=chat_format(SIGNUP, strict=False))
    holds("".join([ch.delta.content or "" async for chunk in stream for ch in chunk.choices]))


async def test_responses_serves_it_and_echoes_the_format_as_sent(serve, demo_backend):
    s = await serve(backend=demo_backend)
    for strict in ({}, {"strict": False}):
        r = await responses_client(s).responses.create(
            model=demo_backend.model_id, input="Sign me up.", max_output_tokens=CAP, temperature=0,
            text={"format": responses_format(SIGNUP, **strict)})
        assert r.status == "completed", r.output_text
        holds(r.output_text)
        assert r.text.format.schema_ == SIGNUP


async def test_ollama_serves_it(serve, demo_backend):
    s = await serve(backend=demo_backend)
    c = ollama.AsyncClient(host=s.base)
    r = await c.chat(model=demo_backend.model_id, messages=USER, format=SIGNUP,
                     options={"temperature": 0, "num_predict": CAP})
    assert r.done_reason == "stop", r.message.content
    holds(r.message.content)
    r = await c.generate(model=demo_backend.model_id, prompt="Sign me up.", format=SIGNUP,
                         options={"temperature": 1, "seed": 5, "num_predict": CAP})
    assert r.done_reason == "stop", r.response
    holds(r.response)


async def test_the_loosened_grammar_still_holds_the_answer(serve):
    """A password without a digit fits what is left (the look-around is gone); one shorter than minLength does
    not: the grammar stops the script there."""
    s = await serve(['{"password":"abcd","contact":"me@x"}', '{"password":"ab","contact":"me@x"}'])
    c = chat_client(s)
    r = await c.chat.completions.create(model="tinytitan-scripted", messages=USER, response_format=chat_format(SIGNUP))
    assert holds(r.choices[0].message.content) == {"password": "abcd", "contact": "me@x"}
    with pytest.raises(openai.InternalServerError, match="does not fit the request's grammar"):
        await c.chat.completions.create(model="tinytitan-scripted", messages=USER, response_format=chat_format(SIGNUP))


async def test_the_loosening_is_worked_out_once_per_schema_and_logged_once(serve, monkeypatch, caplog):
    schema = {**SIGNUP, "title": "once"}  # a schema no other test sends: not cached yet
    faults = []
    real = best_effort_module.schema_fault
    monkeypatch.setattr(best_effort_module, "schema_fault", lambda sc: faults.append(sc) or real(sc))
    s = await serve(['{"password":"abcd","contact":"me@x"}'] * 3)
    caplog.set_level(logging.INFO, logger="tinytitan.structured")
    counts = []
    for _ in range(3):  # the same schema, its keys in the same order
        r = await chat_client(s).chat.completions.create(
            model="tinytitan-scripted", messages=USER, response_format=chat_format(schema))
        holds(r.choices[0].message.content)
        counts.append(len(faults))
    assert counts[0] >= 3 and counts[0] == counts[1] == counts[2], counts  # (as sent, then after each step)
    logged = [rec.getMessage() for rec in caplog.records if "loosened to what the grammar can hold" in rec.getMessage()]
    assert len(logged) == 1 and "response_format.json_schema.schema.properties.password.pattern" in logged[0], logged


async def test_a_strict_format_is_still_refused_by_name(serve):
    s = await serve(["never generated"])
    async with httpx.AsyncClient(timeout=30) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={
            "model": "tinytitan-scripted", "messages": USER, "response_format": chat_format(SIGNUP, strict=True)})
        resp = await c.post(s.url("/v1/responses"), json={
            "model": "tinytitan-scripted", "input": "x", "text": {"format": responses_format(SIGNUP, strict=True)}})
        msgs = await c.post(s.url("/v1/messages"), headers=anthropic_util.HEADERS, json={
            "model": "tinytitan-scripted", "max_tokens": 10, "messages": USER,
            "output_config": {"format": {"type": "json_schema", "schema": SIGNUP}}})
    assert chat.status_code == resp.status_code == msgs.status_code == 400, (chat.text, resp.text, msgs.text)
    assert chat.json()["error"]["param"] == "response_format.json_schema.schema", chat.text
    assert resp.json()["error"]["param"] == "text.format.schema", resp.text
    for message in (chat.json()["error"]["message"], resp.json()["error"]["message"],
                    msgs.json()["error"]["message"]):
        assert "cannot be enforced" in message and ("oneOf" in message or "look-around" in message), message
    assert "output_config.format.schema" in msgs.json()["error"]["message"]


async def test_a_format_no_value_matches_is_refused_even_when_not_strict(serve):
    s = await serve(["never generated"])
    async with httpx.AsyncClient(timeout=30) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={
            "model": "tinytitan-scripted", "messages": USER,
            "response_format": chat_format({"type": "integer", "minimum": 5, "maximum": 1})})
    assert chat.status_code == 400, chat.text
    assert chat.json()["error"]["param"] == "response_format.json_schema.schema"
    assert "minimum (5) is greater than maximum (1)" in chat.json()["error"]["message"]


async def test_a_forced_call_to_a_tool_that_is_not_strict_is_held_to_what_compiles(serve, demo_backend):
    """LangChain's function_calling structured output and the AI SDK's generateObject on Messages force a tool
    that is not strict: its arguments get the same best effort."""
    s = await serve(backend=demo_backend)
    tool = {"type": "function", "function": {"name": "sign_up", "parameters": SIGNUP}}
    r = await chat_client(s).chat.completions.create(
        model=demo_backend.model_id, messages=USER, tools=[tool], tool_choice="required", max_tokens=CAP,
        temperature=0)
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "sign_up"
    holds(call.function.arguments)
    msg = await anthropic_util.message(
        anthropic_util.sdk(s), False, model=demo_backend.model_id, max_tokens=CAP, messages=USER,
        tool_choice={"type": "any"}, extra_body={"temperature": 0},
        tools=[{"name": "sign_up", "input_schema": SIGNUP}])
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "sign_up"
    jsonschema.validate(use.input, LOOSE_SIGNUP)
    async with httpx.AsyncClient(timeout=30) as c:  # a strict tool: still refused by name
        strict = await c.post(s.url("/v1/chat/completions"), json={
            "model": demo_backend.model_id, "messages": USER, "tool_choice": "required",
            "tools": [{"type": "function", "function": {**tool["function"], "strict": True}}]})
    assert strict.status_code == 400 and strict.json()["error"]["param"] == "tool_choice", strict.text
