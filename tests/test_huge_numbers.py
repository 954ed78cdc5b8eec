"""A JSON number past a double's range (1e400): Python's json makes it inf, which passed every check without an
upper bound (and the NaN / Infinity refusal, there so no such value gets past a range check) and was echoed as
bare ``Infinity`` (not JSON). Refused at the parse, naming its field."""

from __future__ import annotations

import json

import httpx
import pytest

import strict

NON_JSON = ("NaN", "Infinity")


# 1e400 is a JSON number no double holds: Python's json makes it inf, which passed every check that has no upper
# bound (and the NaN / Infinity refusal, which is there so that no such value gets past a range check)
@pytest.mark.parametrize("path,body,param", [
    ("/v1/responses", {"model": "tinytitan-scripted", "input": "hi", "tools": [{"type": "function", "name": "f",
     "parameters": {"type": "object", "properties": {"x": {"type": "number", "maximum": "@"}}}}]},
     "tools[0].parameters.properties.x.maximum"),
    ("/api/chat", {"model": "tinytitan-scripted", "stream": False, "messages": [{"role": "user", "content": "hi"}],
                   "options": {"temperature": "@"}}, "options.temperature"),
    ("/api/chat", {"model": "tinytitan-scripted", "stream": False, "messages": [{"role": "user", "content": "hi"}],
                   "temperature": "@"}, "temperature"),
    ("/v1/chat/completions", {"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}],
                              "repetition_penalty": "@"}, "repetition_penalty"),
])
@pytest.mark.parametrize("literal", ["1e400", "-1e400"])
async def test_a_number_past_a_double_is_refused_naming_its_field(serve, path, body, param, literal):
    s = await serve(["ok"])
    raw = json.dumps(body).replace('"@"', literal)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), content=raw, headers={"content-type": "application/json"})
    assert not any(w in r.text for w in NON_JSON), r.text  # never echoed as Infinity
    assert r.status_code == 400, r.text[:300]
    if path.startswith("/api/"):
        assert param in r.json()["error"]
    else:
        strict.body(r.content)
        assert r.json()["error"]["param"] == param, r.text
