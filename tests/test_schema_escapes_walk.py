"""``\\u`` is dropped only where an object admits extra keys beside declared ones. The walk that
looks for one reads subschemas only: a property named ``properties`` (GeoJSON's Feature, a tool that sets an
object's properties) is no schema keyword, and a const/enum/default value is no schema. And where a schema does
have such an object, a const holding a control character keeps ``\\u`` (never written wrong, its ESC left out)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar
from tinytitan.engine.structured.compile import ALL_ESCAPES, escapes

from grammar_walk import forced_document

CLOSED = {"type": "object", "additionalProperties": False, "required": ["name", "properties"], "properties": {
    "name": {"const": "\u0003"},
    "properties": {"type": "object", "properties": {"c": {"type": "string"}}, "required": ["c"],
                   "additionalProperties": False}}}


@pytest.mark.parametrize("schema", [
    CLOSED,
    {"type": "object", "properties": {"k": {"const": "\u0003"}}, "required": ["k"], "additionalProperties": False,
     "default": {"properties": {"x": 1}}},
])
def test_no_open_object_keeps_u(schema):
    assert escapes(schema)["json_allowed_escapes"] == ALL_ESCAPES


def test_a_property_named_properties_does_not_break_a_control_character_const(demo_tok):
    doc = forced_document(CLOSED, demo_tok)  # before: the matcher failed after '{"name":' (NoExtensionBias)
    assert doc.startswith('{"name":"\\u0003"')


def accepts(schema: dict, text: str, tok) -> bool:
    g = compile_grammar(Grammar("json_schema", schema), tok)
    m = g.matcher()
    tokens = g.tokenizer.tokenize_str(text)
    return m.try_consume_tokens(tokens) == len(tokens) and not m.is_error() and m.is_accepting()


def test_an_open_object_never_writes_a_control_character_const_wrong(demo_tok):
    schema = {"type": "object", "properties": {"k": {"const": "\u001b[0m"}}, "required": ["k"]}
    wrong = '{"k":"[0m"}'  # the ESC left out
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(wrong), schema)
    assert not accepts(schema, wrong, demo_tok)  # (without \\u: accepted, and the only document forced)
    assert accepts(schema, '{"k":"\\u001b[0m"}', demo_tok)


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("forced", [False, True])
async def test_over_http_such_a_schema_is_served_with_its_control_character(serve, forced):
    import httpx

    schema = {"type": "object", "properties": {"color": {"const": "\u001b[31m"}}, "required": ["color"]}
    s = await serve(['<tool_call>\n{"name": "paint", "arguments": {"color": "\\u001b[31m"}}\n</tool_call>' if forced
                     else '{"color":"\\u001b[31m"}'])
    body = {"model": "tinytitan-scripted", "messages": USER}
    if forced:
        body |= {"tools": [{"type": "function", "function": {"name": "paint", "parameters": schema}}],
                 "tool_choice": "required"}
    else:
        body |= {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json=body)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    text = message["tool_calls"][0]["function"]["arguments"] if forced else message["content"]
    assert json.loads(text) == {"color": "\u001b[31m"}
