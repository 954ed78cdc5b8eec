"""A strict function tool under tool_choice auto (the SDK's ``pydantic_function_tool`` makes every tool strict)
whose schema holds a keyword the grammar cannot promise: refused by name and path, in the words a forced call
and an output format use — not the grammar compiler's dump of its lark source, naming only 'tools'."""

from __future__ import annotations

import datetime

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

MODEL = "tinytitan-scripted"


class Tag(BaseModel):
    tags: set[str]  # JSON schema: {"type": "array", "uniqueItems": true}


@pytest.mark.parametrize("choice", ["auto", "required"])
async def test_a_strict_tools_unenforceable_keyword_is_refused_by_name(serve, choice):
    s = await serve(["never generated"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": MODEL, "messages": [{"role": "user", "content": "tag it"}], "tool_choice": choice,
            "tools": [openai.pydantic_function_tool(Tag)]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "JSON schema keyword 'uniqueItems' at 'tools.Tag.parameters.properties.tags.uniqueItems'" in err["message"]
    assert "lark" not in err["message"]
    assert err["code"] == "unsupported_schema"
    if choice == "auto":
        assert err["param"] == "tools.Tag.parameters.properties.tags.uniqueItems"


class Timer(BaseModel):
    after: datetime.timedelta  # {"type": "string", "format": "duration"}
    host: str = Field(json_schema_extra={"format": "hostname"})


@pytest.mark.parametrize("choice", ["auto", "required"])
async def test_the_formats_openai_strict_mode_takes_are_enforced_not_refused(serve, choice):
    """pydantic's timedelta is format duration; hostname is among the API's strict formats: both served."""
    s = await serve(['<tool_call>\n{"name": "Timer", "arguments": {"after": "PT5M", "host": "example.com"}}\n'
                     '</tool_call>'])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": MODEL, "messages": [{"role": "user", "content": "set it"}], "tool_choice": choice,
            "tools": [openai.pydantic_function_tool(Timer)]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "Timer"
