"""An output format that is not strict is served: what the grammar cannot promise is left out, the rest enforced.

OpenAI holds a json_schema format whose ``strict`` is false or absent (the default on Chat and on Responses) to no
schema, and LangChain's ``with_structured_output(method="json_schema")`` sends ``strict`` only when asked, so a
pydantic ``HttpUrl`` (``format: "uri"``) reaches a server without it; Ollama's ``format`` has no strict flag, and
Ollama's schema-to-grammar skips what it cannot express. A strict format (``strict: true``, and Messages', which
is always strict) is still refused by name. The demo model has random weights: whatever validates, the grammar
made valid.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import ollama
import pytest

import anthropic_util
from responses_helpers import client as responses_client
from chat_helpers import client as chat_client
from tinytitan.errors import ApiError
from tinytitan.output_format import loosened, normalise, normalise_ollama

# a link as zod's z.url() or pydantic's HttpUrl write it: a format the grammar does not enforce
LINK = {"type": "object", "properties": {"url": {"type": "string", "format": "uri", "maxLength": 20},
                                         "stars": {"type": "integer", "minimum": 0, "maximum": 5}},
        "required": ["url", "stars"], "additionalProperties": False}
# an OpenAPI document's schema: a $ref into its components, which the grammar leaves out with the keyword
OPENAPI = {"type": "object", "components": {"schemas": {"Url": {"type": "string", "format": "uri"}}},
           "properties": {"site": {"$ref": "#/components/schemas/Url", "type": "string", "maxLength": 16},
                          "kind": {"enum": ["blog", "shop"]}},
           "required": ["site", "kind"], "additionalProperties": False}
SCHEMAS = {"uri": LINK, "ref": OPENAPI}
USER = [{"role": "user", "content": "A link, please."}]
CAP = 120


def chat_format(schema: dict, **strict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "link", "schema": schema, **strict}}


def responses_format(schema: dict, **strict) -> dict:
    return {"type": "json_schema", "name": "link", "schema": schema, **strict}


def holds(text: str, schema: dict) -> dict:
    """The answer is a document of ``schema`` (its formats unchecked: the API promises none for such a format)."""
    doc = json.loads(text)
    jsonschema.validate(doc, schema)
    return doc


@pytest.mark.parametrize("strict", [{}, {"strict": False}, {"strict": None}], ids=["absent", "false", "null"])
@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS)
def test_a_format_that_is_not_strict_is_loosened_on_chat_and_responses(schema, strict):
    chat = normalise(chat_format(schema, **strict), "response_format")
    flat = normalise(responses_format(schema, **strict), "text.format")
    assert chat.source == flat.source == loosened(schema) != schema
    assert "components" not in chat.source and "format" not in json.dumps(chat.source)
    assert flat.where == "text.format.schema" and chat.where == "response_format.json_schema.schema"


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS)
def test_ollamas_format_and_llama_cpps_spelling_are_loosened(schema):
    assert normalise_ollama(schema).source == loosened(schema)
    assert normalise({"type": "json_object", "schema": schema}, "response_format").source == loosened(schema)


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS)
def test_a_strict_format_and_messages_formats_are_still_refused_by_name(schema):
    for fmt, where in ((chat_format(schema, strict=True), "response_format"),
                       (responses_format(schema, strict=True), "text.format")):
        with pytest.raises(ApiError) as err:
            normalise(fmt, where)
        assert err.value.code == "unsupported_schema" and err.value.param.startswith(where), err.value.message
    for strict in ({}, {"strict": False}):  # Messages has no such flag: its formats are always strict
        with pytest.raises(ApiError) as err:
            normalise({"type": "json_schema", "schema": schema, **strict}, "output_config.format", ("json_schema",),
                      strict=True)
        assert err.value.code == "unsupported_schema", err.value.message


@pytest.mark.parametrize("name", SCHEMAS)
async def test_chat_serves_a_format_that_is_not_strict(serve, demo_backend, name):
    s = await serve(backend=demo_backend)
    r = await chat_client(s).chat.completions.create(
        model=demo_backend.model_id, messages=USER, max_tokens=CAP, temperature=0,
        response_format=chat_format(SCHEMAS[name]))
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    holds(r.choices[0].message.content, SCHEMAS[name])
    stream = await chat_client(s).chat.completions.create(
        model=demo_backend.model_id, messages=USER, max_tokens=CAP, temperature=1, seed=2, stream=True,
        response_format=chat_format(SCHEMAS[name], strict=False))
    text = "".join([ch.delta.content or "" async for chunk in stream for ch in chunk.choices])
    holds(text, SCHEMAS[name])


@pytest.mark.parametrize("name", SCHEMAS)
async def test_responses_serves_a_format_that_is_not_strict(serve, demo_backend, name):
    s = await serve(backend=demo_backend)
    for strict in ({}, {"strict": False}):
        r = await responses_client(s).responses.create(
            model=demo_backend.model_id, input="A link, please.", max_output_tokens=CAP, temperature=0,
            text={"format": responses_format(SCHEMAS[name], **strict)})
        assert r.status == "completed", r.output_text
        holds(r.output_text, SCHEMAS[name])
        assert r.text.format.schema_ == SCHEMAS[name]  # echoed as sent, not as loosened


@pytest.mark.parametrize("name", SCHEMAS)
async def test_ollama_serves_a_format_the_grammar_cannot_wholly_promise(serve, demo_backend, name):
    s = await serve(backend=demo_backend)
    c = ollama.AsyncClient(host=s.base)
    r = await c.chat(model=demo_backend.model_id, messages=USER, format=SCHEMAS[name],
                     options={"temperature": 0, "num_predict": CAP})
    assert r.done_reason == "stop", r.message.content
    holds(r.message.content, SCHEMAS[name])
    r = await c.generate(model=demo_backend.model_id, prompt="A link, please.", format=SCHEMAS[name],
                         options={"temperature": 1, "seed": 3, "num_predict": CAP})
    assert r.done_reason == "stop", r.response
    holds(r.response, SCHEMAS[name])


async def test_a_strict_format_is_still_refused_by_name_over_http(serve):
    s = await serve(["never generated"])
    async with httpx.AsyncClient(timeout=30) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={
            "model": "tinytitan-scripted", "messages": USER, "response_format": chat_format(LINK, strict=True)})
        resp = await c.post(s.url("/v1/responses"), json={
            "model": "tinytitan-scripted", "input": "x", "text": {"format": responses_format(OPENAPI, strict=True)}})
        msgs = await c.post(s.url("/v1/messages"), headers=anthropic_util.HEADERS, json={
            "model": "tinytitan-scripted", "max_tokens": 10, "messages": USER,
            "output_config": {"format": {"type": "json_schema", "schema": LINK}}})
    assert chat.status_code == resp.status_code == msgs.status_code == 400, (chat.text, resp.text, msgs.text)
    assert chat.json()["error"]["param"] == "response_format.json_schema.schema.properties.url.format"
    assert '"uri"' in chat.json()["error"]["message"]
    assert resp.json()["error"]["param"] == "text.format.schema.components"
    assert "'components'" in resp.json()["error"]["message"]
    assert "output_config.format.schema.properties.url.format" in msgs.json()["error"]["message"]
