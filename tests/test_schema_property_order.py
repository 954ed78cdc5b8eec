"""A schema's property order is its document's (OpenAI: "outputs will be produced in the same order as the
ordering of keys in the schema"). The grammar cache keyed a schema by its sorted-key JSON, so a schema whose
properties reorder one seen before (by any client) got that one's grammar and its order: a script in the
second schema's own order failed the request ("does not fit the request's grammar"), and a model's answer came
in the first schema's order."""

from __future__ import annotations

from chat_helpers import client

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


def fmt(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


async def test_a_reordered_schema_gets_its_own_order(serve):
    first = {"type": "object", "properties": {"hunt_reasoning": {"type": "string"}, "hunt_answer": {"type": "string"}},
             "additionalProperties": False}
    second = {**first, "properties": dict(reversed(first["properties"].items()))}
    s = await serve(['{"hunt_reasoning":"r","hunt_answer":"a"}', '{"hunt_answer":"a","hunt_reasoning":"r"}'])
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, response_format=fmt(first))
    assert r.choices[0].message.content == '{"hunt_reasoning":"r","hunt_answer":"a"}'
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, response_format=fmt(second))
    assert r.choices[0].message.content == '{"hunt_answer":"a","hunt_reasoning":"r"}'
