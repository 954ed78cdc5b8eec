"""Where properties are declared and other keys are allowed (no ``additionalProperties: false``: pydantic's
``model_json_schema()`` as Ollama clients send it, a non-strict schema), llguidance admitted an extra key spelt
with ``\\u`` escapes that names a declared property (``"\\u0062"`` is ``"b"``) and held its value to the extra
keys' schema: the parsed document's ``b`` broke b's schema, served with ``finish_reason: "stop"``."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from chat_helpers import client
from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


def fmt(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def accepts(schema: dict, text: str, tok) -> bool:
    g = compile_grammar(Grammar("json_schema", schema), tok)
    m = g.matcher()
    tokens = g.tokenizer.tokenize_str(text)
    return m.try_consume_tokens(tokens) == len(tokens) and not m.is_error() and m.is_accepting()


@pytest.mark.parametrize("schema,text", [
    ({"type": "object", "properties": {"b": {"type": "integer"}}}, '{"\\u0062":"x"}'),
    ({"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}, '{"b":1,"\\u0062":"x"}'),
    ({"type": "object", "properties": {"名前": {"type": "string"}}}, '{"\\u540d\\u524d":5}'),
    ({"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     '{"\\u0062":"x"}'),
])
def test_a_declared_name_spelt_with_escapes_is_not_an_extra_key(schema, text, demo_tok):
    with pytest.raises(jsonschema.ValidationError):  # what the mask let through would not validate
        jsonschema.validate(json.loads(text), schema)
    assert not accepts(schema, text, demo_tok)
    assert accepts(schema, '{"c":"x"}' if "required" not in schema else '{"b":1,"c":"x"}', demo_tok)


async def test_over_http_the_escaped_key_is_refused(serve):
    schema = {"type": "object", "properties": {"b": {"type": "integer"}}}
    s = await serve(['{"\\u0062":"x"}'])
    with pytest.raises(openai.InternalServerError) as err:  # the scripted output no longer fits the grammar
        await client(s).chat.completions.create(model=MODEL, messages=USER, response_format=fmt(schema))
    assert "grammar" in str(err.value)
