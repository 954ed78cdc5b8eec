"""Spec-language: a route may change request fields (``routes[].fields``); checked at load like the rest."""

from __future__ import annotations

import httpx
import pytest
import yaml

from tinytitan.errors import ApiError
from tinytitan.speclang import load_protocol
from tinytitan.speclang.load import SpecError, compile_spec, spec_dir
from tinytitan.speclang.validate import RequestValidator

BASE = {
    "protocol": "demo",
    "errors": {"envelope": {"error": "$message"}, "kinds": {"server_error": {"status": 500, "type": "x"},
                                                            "invalid_request": {"status": 400, "type": "bad"}}},
    "routes": [{"method": "POST", "path": "/a", "handler": "a"},
               {"method": "POST", "path": "/b", "handler": "b", "fields": {"n": {"required": False}}}],
    "request": {"fields": {"n": {"type": "integer", "required": True, "min": 1}}},
}


def test_a_route_can_relax_a_field():
    spec = compile_spec(BASE, "demo.yaml")
    strict = RequestValidator(spec, {})
    relaxed = RequestValidator(spec, {}, spec.routes[1]["fields"])
    with pytest.raises(ApiError, match="'n'"):
        strict.validate({})
    assert relaxed.validate({}).body == {}
    with pytest.raises(ApiError, match="minimum"):  # the rest of the field's table still holds
        relaxed.validate({"n": 0})


def test_a_route_changing_an_undeclared_field_fails_at_load():
    bad = yaml.safe_load(yaml.safe_dump(BASE))
    bad["routes"][1]["fields"] = {"m": {"required": False}}
    with pytest.raises(SpecError, match=r"demo.yaml: routes\[1\].fields.m: .*'m'"):
        compile_spec(bad, "demo.yaml")
    bad["routes"][1]["fields"] = {"n": {"reqired": False}}
    with pytest.raises(SpecError, match="demo.yaml: routes"):
        compile_spec(bad, "demo.yaml")


def test_every_spec_file_loads():
    names = sorted(p.stem for p in spec_dir().glob("*.yaml"))
    assert {"shared", "openai_chat", "anthropic_messages"} <= set(names)
    for name in names:
        load_protocol(name)


async def test_chat_completions_still_work(serve):
    s = await serve(["<think>r</think>Hi.", "Hi again."])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/chat/completions"),
                         json={"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        assert msg["content"] == "Hi." and msg["reasoning_content"] == "r"
        assert r.headers["openai-version"] == "2020-10-01" and r.headers["x-request-id"] == r.headers["request-id"]
        r = await c.post(s.url("/v1/chat/completions"), json={"model": "x", "messages": []})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = await c.post(s.url("/v1/chat/completions/nope"), json={})
        assert r.status_code == 404 and "error" in r.json() and "type" not in r.json()
