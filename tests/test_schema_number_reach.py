"""A number bound past what the grammar compiler can write (±2**63: Zod 4's ``z.float64()`` sends ±1.8e308,
pydantic's ``confloat(le=1e20)`` 1e20) narrows to ±9e18 rather than refusing a schema the real API takes: the
document still holds to the schema. A range that narrowing would empty is still refused by name in a strict
format."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

USER = [{"role": "user", "content": "Give me a number."}]


def fmt(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.mark.parametrize("bounds", [{"minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308},
                                    {"minimum": 0, "maximum": 1e20}, {"exclusiveMaximum": 3.4e38}])
async def test_a_bound_past_reach_narrows(serve, demo_backend, bounds):
    schema = {"type": "object", "properties": {"x": {"type": "number", **bounds}}, "required": ["x"],
              "additionalProperties": False}
    s = await serve(backend=demo_backend)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": demo_backend.model_id, "messages": USER, "max_tokens": 40, "seed": 3,
            "response_format": fmt(schema)})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        jsonschema.validate(json.loads(choice["message"]["content"]), schema)


async def test_a_range_narrowing_would_empty_is_refused_when_strict(serve, demo_backend):
    """(A format that is not strict is held to the rest of its schema instead: test_best_effort_formats.py.)"""
    schema = {"type": "object", "properties": {"x": {"type": "number", "minimum": 1e19, "maximum": 1e20}}}
    s = await serve(backend=demo_backend)
    strict = fmt(schema)
    strict["json_schema"]["strict"] = True
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": demo_backend.model_id, "messages": USER, "max_tokens": 8, "response_format": strict})
        loose = await c.post(s.url("/v1/chat/completions"), json={
            "model": demo_backend.model_id, "messages": USER, "max_tokens": 40, "response_format": fmt(schema)})
    assert r.status_code == 400 and "response_format" in r.json()["error"]["param"], r.text
    assert loose.status_code == 200, loose.text
