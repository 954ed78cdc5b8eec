"""A discriminated union's ``discriminator`` (OpenAPI's hint beside ``oneOf``/``anyOf``: which property names the
branch) is an annotation: the branches' own ``const`` already decide which one a document is, so the grammar
enforces the union exactly with or without it. Pydantic writes it for every ``Field(discriminator=…)``, and
OpenAI Agents sends it as written (``Agent(output_type=…)``: its strict schema turns the ``oneOf`` into ``anyOf``
and keeps the hint), as OpenAI and Ollama take it. Before, it was refused as an unknown keyword, a 400 on every
wire."""

from __future__ import annotations

import json

import ollama
import pytest

from responses_helpers import client as openai_client

# what OpenAI Agents sends for an output_type holding list[Annotated[Cat | Dog, Field(discriminator="kind")]]
PETS = {
    "$defs": {
        "Cat": {"properties": {"kind": {"const": "cat", "title": "Kind", "type": "string"},
                               "lives": {"title": "Lives", "type": "integer"}},
                "required": ["kind", "lives"], "title": "Cat", "type": "object", "additionalProperties": False},
        "Dog": {"properties": {"kind": {"const": "dog", "title": "Kind", "type": "string"},
                               "good": {"title": "Good", "type": "boolean"}},
                "required": ["kind", "good"], "title": "Dog", "type": "object", "additionalProperties": False}},
    "properties": {"pets": {"items": {"discriminator": {"mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"},
                                                        "propertyName": "kind"},
                                      "anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]},
                            "title": "Pets", "type": "array"}},
    "required": ["pets"], "title": "Pets", "type": "object", "additionalProperties": False}
DOC = '{"pets":[{"kind":"cat","lives":9},{"kind":"dog","good":true}]}'
WRONG = '{"pets":[{"kind":"cat","good":true}]}'   # a dog's key under the cat's kind: no branch admits it


async def _ask(s, wire: str) -> str:
    if wire == "chat":
        r = await openai_client(s).chat.completions.create(model="tinytitan-scripted", messages=[
            {"role": "user", "content": "pets"}], response_format={"type": "json_schema", "json_schema": {
                "name": "Pets", "strict": True, "schema": PETS}})
        return r.choices[0].message.content
    if wire == "responses":
        r = await openai_client(s).responses.create(model="tinytitan-scripted", input="pets", text={
            "format": {"type": "json_schema", "name": "Pets", "strict": True, "schema": PETS}})
        if r.status == "failed":   # (a generation that failed is a failed response, in band)
            raise RuntimeError(r.error.message)
        return r.output_text
    r = await ollama.AsyncClient(host=s.url("")).chat(model="tinytitan-scripted", format=PETS,
                                                     messages=[{"role": "user", "content": "pets"}])
    return r.message.content


@pytest.mark.parametrize("wire", ["chat", "responses", "ollama"])
async def test_a_discriminated_union_is_taken_and_enforced(serve, wire):
    s = await serve([DOC])
    assert json.loads(await _ask(s, wire)) == json.loads(DOC)
    wrong = await serve([WRONG])
    with pytest.raises(Exception) as failed:   # the scripted document does not fit the union: the grammar holds
        await _ask(wrong, wire)
    assert "does not fit the request's grammar" in str(failed.value)


def test_its_shape_is_checked():
    from tinytitan.errors import ApiError
    from tinytitan.output_format import check_schema

    with pytest.raises(ApiError) as refused:
        check_schema({"anyOf": [{"type": "string"}], "discriminator": "kind"}, "schema")
    assert "schema.discriminator" in str(refused.value)
