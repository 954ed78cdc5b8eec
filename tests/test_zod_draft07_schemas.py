"""The schemas the Vercel AI SDK sends: zod 4 converted with ``target: "draft-7"`` (``$schema`` draft-07).

``z.record(z.string(), X)`` becomes ``{"type": "object", "propertyNames": {"type": "string"},
"additionalProperties": X}`` (a property-name schema every JSON key satisfies), and ``z.tuple([A, B])``
becomes draft-07's tuple, ``{"items": [A, B], "additionalItems": false}``. Both reach the keyword table
through ``generateObject`` (``response_format`` / ``text.format``; a forced ``json`` tool on Messages) and
every forced tool call; the grammar enforces both exactly.
"""

from __future__ import annotations

import httpx
import llguidance
import pytest

import anthropic_util
from tinytitan.chat_request import Grammar
from tinytitan.engine.structured.compile import compile_grammar

# what zod 4 writes for z.object({tags: z.record(z.string(), z.number()), pos: z.tuple([z.string(), z.number()])})
ZOD = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
       "properties": {"tags": {"type": "object", "propertyNames": {"type": "string"},
                               "additionalProperties": {"type": "number"}},
                      "pos": {"type": "array", "items": [{"type": "string"}, {"type": "number"}],
                              "additionalItems": False, "minItems": 2, "maxItems": 2}},
       "required": ["tags", "pos"], "additionalProperties": False}
DOC = '{"tags":{"a":1},"pos":["x",2]}'
CALL = '<tool_call>\n{"name": "json", "arguments": {"tags": {"a": 1}, "pos": ["x", 2]}}\n</tool_call>'


def _body(kind: str) -> tuple[str, dict, dict | None]:
    if kind == "chat":
        return "/v1/chat/completions", {"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "x"}],
                                        "response_format": {"type": "json_schema", "json_schema": {
                                            "name": "response", "strict": True, "schema": ZOD}}}, None
    if kind == "responses":
        return "/v1/responses", {"model": "tinytitan-scripted", "input": "x", "text": {"format": {
            "type": "json_schema", "name": "response", "strict": True, "schema": ZOD}}}, None
    # Messages: the AI SDK's tool mode for generateObject (a forced tool named json)
    return "/v1/messages", {"model": "tinytitan-scripted", "max_tokens": 200,
                            "messages": [{"role": "user", "content": "x"}],
                            "tools": [{"name": "json", "description": "Respond with a JSON object.",
                                       "input_schema": ZOD}],
                            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}, anthropic_util.HEADERS


@pytest.mark.parametrize("kind", ["chat", "responses", "messages"])
async def test_a_zod_record_and_tuple_are_served(serve, kind):
    s = await serve([CALL if kind == "messages" else DOC])
    path, body, headers = _body(kind)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json=body, headers=headers)
    assert r.status_code == 200, r.text
    data = r.json()
    if kind == "chat":
        assert data["choices"][0]["message"]["content"] == DOC
    elif kind == "responses":
        assert data["status"] == "completed" and data["output"][-1]["content"][0]["text"] == DOC
    else:
        assert data["content"][-1]["input"] == {"tags": {"a": 1}, "pos": ["x", 2]}


def _accepts(compiled, tok, doc: str) -> bool:
    m = llguidance.LLMatcher(compiled.tokenizer, compiled.text)
    return bool(m.consume_tokens(tok.encode(doc, add_special_tokens=False))) and m.is_accepting()


def test_a_draft_07_tuple_is_enforced_as_one(demo_tok):
    compiled = compile_grammar(Grammar("json_schema", ZOD, where="schema"), demo_tok)
    assert _accepts(compiled, demo_tok, DOC)
    assert not _accepts(compiled, demo_tok, '{"tags":{},"pos":["x","y"]}')  # the second item is a number
    assert not _accepts(compiled, demo_tok, '{"tags":{},"pos":["x",2,3]}')  # additionalItems: false
    assert not _accepts(compiled, demo_tok, '{"tags":{"a":"b"},"pos":["x",2]}')  # a record's values hold
    open_tail = {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "boolean"}}
    compiled = compile_grammar(Grammar("json_schema", open_tail, where="schema"), demo_tok)
    assert _accepts(compiled, demo_tok, '["x",true,false]') and not _accepts(compiled, demo_tok, '["x",1]')
    dated = {"type": "array", "items": [{"type": "string", "format": "date"}], "additionalItems": False}
    compiled = compile_grammar(Grammar("json_schema", dated, where="schema"), demo_tok)  # our date pattern holds
    assert _accepts(compiled, demo_tok, '["2024-02-28"]') and not _accepts(compiled, demo_tok, '["2024-02-29"]')


@pytest.mark.parametrize("names", [{"pattern": "^a"}, {"enum": ["a"]}, {"type": "string", "maxLength": 3}])
async def test_a_property_name_schema_that_constrains_is_still_refused_by_name(serve, names):
    s = await serve(["never generated"])
    schema = {"type": "object", "propertyNames": names, "additionalProperties": {"type": "number"}}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": "tinytitan-scripted", "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schema}}})
    assert r.status_code == 400, r.text
    assert "'propertyNames'" in r.json()["error"]["message"]


def test_prefix_items_hold_under_a_draft_07_schema_uri(demo_tok):
    """The keyword table reads 2020-12 whatever ``$schema`` says: the compiler, told draft-07, would drop
    ``prefixItems`` and let ``[1]`` through where a string is required."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
              "prefixItems": [{"type": "string"}]}
    compiled = compile_grammar(Grammar("json_schema", schema, where="schema"), demo_tok)
    assert _accepts(compiled, demo_tok, '["x"]') and not _accepts(compiled, demo_tok, "[1]")
