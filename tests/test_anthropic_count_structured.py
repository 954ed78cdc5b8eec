"""count_tokens counts the prompt exactly as generation renders it — also where the request forces a tool
call or an output format (reasoning off, only the named tool declared)."""

from __future__ import annotations

import pytest

from anthropic_util import MODEL, post

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"name": "get_weather", "input_schema": SCHEMA}, {"name": "get_time", "input_schema": SCHEMA}]
FORMAT = {"type": "json_schema",
          "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}

CASES = {
    "format": ({"output_config": {"format": FORMAT}}, '{"a":1}'),
    "any": ({"tools": TOOLS, "tool_choice": {"type": "any"}}, CALL),
    "named": ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "get_weather"}}, CALL),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_count_tokens_matches_generation_under_a_forced_call_or_format(serve, case):
    fields, output = CASES[case]
    s = await serve([output])
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
    counted = (await post(s, payload, "/v1/messages/count_tokens")).json()["input_tokens"]
    made = (await post(s, {**payload, "max_tokens": 100})).json()
    assert made["usage"]["input_tokens"] == counted, (counted, made["usage"])
