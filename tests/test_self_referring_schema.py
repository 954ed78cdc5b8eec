"""A schema with no document (a reference that resolves only to itself) is the client's 400 naming it, and a
matcher that can go no further fails the generation: never an empty or broken document passed off as complete.

Before, llguidance compiled ``{"$ref": "#"}`` without a word and its matcher's first mask left only
end-of-sequence: Chat answered ``content: ""`` with ``finish_reason: "stop"``; a property whose schema refers
to itself came back as ``{"a":`` with ``stop`` (Messages: ``end_turn``)."""

from __future__ import annotations

import httpx
import pytest

import anthropic_util
from tinytitan.chat_request import Grammar
from tinytitan.errors import ApiError
from tinytitan.output_format import normalise

SELF = {"$ref": "#"}
CYCLE = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}
PROPERTY = {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]}
# no finite document: an object that must hold one of its own kind (directly, inside an array of at least one,
# or through an inline object it requires)
REQUIRED = {"type": "object", "properties": {"k": {"$ref": "#"}}, "required": ["k"]}
# the same through a choice whose every branch comes back: the compiler took these, and the generation failed at
# the matcher's limit, a 500 after the whole output budget (a oneOf not strict is read as an anyOf)
CHOICE = {"type": "object", "properties": {"a": {"anyOf": [{"$ref": "#"}, {"$ref": "#/properties/a"}]}},
          "required": ["a"]}
ONE_OF = {"type": "object", "properties": {"a": {"oneOf": [{"$ref": "#"}]}}, "required": ["a"]}
ANY_OF = {"anyOf": [{"$ref": "#"}]}


def chat_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schema}}


@pytest.mark.parametrize("schema,at", [(SELF, "schema.$ref"), (CYCLE, "schema.$ref"),
                                       (PROPERTY, "schema.properties.a.$ref"),
                                       (REQUIRED, "schema.properties.k.$ref"),
                                       (CHOICE, "schema.properties.a.anyOf[0].$ref"),
                                       (ONE_OF, "schema.properties.a.oneOf[0].$ref"), (ANY_OF, "schema.anyOf[0].$ref")])
async def test_a_reference_to_itself_is_a_400_on_each_protocol(serve, demo_backend, schema, at):
    s = await serve(backend=demo_backend)
    model = demo_backend.model_id
    async with httpx.AsyncClient(timeout=60) as c:
        chat = await c.post(s.url("/v1/chat/completions"), json={
            "model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 30,
            "response_format": chat_format(schema)})
        resp = await c.post(s.url("/v1/responses"), json={
            "model": model, "input": "x", "max_output_tokens": 30,
            "text": {"format": {"type": "json_schema", "name": "t", "schema": schema}}})
        msg = await c.post(s.url("/v1/messages"), headers=anthropic_util.HEADERS, json={
            "model": model, "max_tokens": 30, "messages": [{"role": "user", "content": "x"}],
            "output_config": {"format": {"type": "json_schema", "schema": schema}}})
        ollama = await c.post(s.url("/api/chat"), json={
            "model": model, "stream": False, "messages": [{"role": "user", "content": "x"}], "format": schema})
    assert chat.status_code == 400, chat.text
    assert chat.json()["error"]["param"] == f"response_format.json_schema.{at}"
    assert resp.status_code == 400 and resp.json()["error"]["param"] == f"text.format.{at}", resp.text
    assert "comes back to itself" in chat.json()["error"]["message"] and "comes back" in resp.text
    assert msg.status_code == 400 and "comes back to itself" in msg.json()["error"]["message"], msg.text
    assert f"output_config.format.{at}" in msg.json()["error"]["message"]
    assert ollama.status_code == 400 and "comes back to itself" in ollama.json()["error"], ollama.text
    assert f"'format.{at.removeprefix('schema.')}'" in ollama.json()["error"], ollama.text


def test_a_recursive_schema_that_descends_is_taken():
    for schema in ({"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}}},
                   {"type": "object", "properties": {"tail": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}}},
                   {"allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"type": "integer"}}},
                   # a way out: null, an empty array, a property it may leave out, a choice
                   {"type": ["object", "null"], "properties": {"k": {"$ref": "#"}}, "required": ["k"]},
                   {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#"}}},
                    "required": ["k"]},
                   {"type": "object", "properties": {"k": {"$ref": "#"}, "v": {"type": "integer"}}, "required": ["v"]},
                   {"type": "object", "properties": {"k": {"anyOf": [{"$ref": "#"}, {"type": "string"}]}},
                    "required": ["k"]},
                   {"type": "object", "properties": {"k": {"oneOf": [{"$ref": "#/$defs/n"}, {"$ref": "#"}]}},
                    "required": ["k"], "$defs": {"n": {"type": "integer"}}}):
        assert normalise({"type": "json_schema", "name": "t", "schema": schema}, "text.format") is not None


@pytest.mark.parametrize("schema,at", [
    ({"type": "object", "properties": {"k": {"type": "array", "minItems": 1, "items": {"$ref": "#"}}},
      "required": ["k"]}, "t.schema.properties.k.items.$ref"),
    ({"type": "object", "required": ["k"], "properties": {"k": {"type": "object", "required": ["j"],
                                                                "properties": {"j": {"$ref": "#/$defs/n"}}}},
      "$defs": {"n": {"allOf": [{"$ref": "#"}]}}}, "t.schema.properties.k.properties.j.$ref"),
])
def test_an_object_that_must_hold_its_own_kind_is_refused_by_path(schema, at):
    with pytest.raises(ApiError) as err:
        normalise({"type": "json_schema", "name": "t", "schema": schema}, "t")
    assert err.value.param == at and "no finite value" in err.value.message, err.value.message


def test_a_grammar_that_admits_nothing_is_refused_when_compiled(demo_backend):
    """What the keyword table cannot see: the compiler's own check of the first mask."""
    from tinytitan.engine.structured import compile_grammar

    with pytest.raises(ApiError) as err:
        compile_grammar(Grammar("json_schema", {"anyOf": [{"$ref": "#"}]}, where="response_format"),
                        demo_backend.tokenizer, demo_backend.vocab_size)
    assert err.value.param == "response_format" and "admits no output" in str(err.value)


def test_a_matcher_with_no_way_on_fails_the_generation_never_ends_it(demo_backend):
    """Past the compile-time checks (a grammar straight from the compiler), the mask computed after ``{"a":``
    has no way on: the generation fails there instead of leaving end-of-sequence as the only token."""
    from tinytitan.engine.structured import GrammarMask, compile_grammar
    from tinytitan.engine.structured.processor import GrammarFailed

    compiled = compile_grammar(Grammar("json_schema", PROPERTY), demo_backend.tokenizer, demo_backend.vocab_size)
    mask = GrammarMask(compiled)
    mask.allowed_mx(compiled.vocab_size)
    with pytest.raises(GrammarFailed):
        for token in compiled.tokenizer.tokenize_str('{"a":'):
            mask.advance(token)
