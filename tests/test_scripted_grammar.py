"""The scripted backend is held to the request's grammar as a masked model is (engine/backends/scripted.py): a script
the grammar refuses fails the request by saying so — never plain text answering ``tool_choice: "required"``
with ``finish_reason: "stop"`` — and where the grammar leaves only end-of-sequence the answer ends there."""

from __future__ import annotations

import openai
import pytest

import anthropic_util
from chat_helpers import client

MODEL = "tinytitan-scripted"
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("stream", [False, True])
async def test_plain_text_under_a_forced_call_fails_the_request_by_name(serve, stream):
    s = await serve(["Just some text."])
    with pytest.raises(openai.APIError) as err:
        r = await client(s).chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice="required",
                                                    stream=stream)
        if stream:
            async for _ in r:
                pass
    assert "does not fit the request's grammar" in str(err.value)


async def test_a_forced_call_as_the_mask_writes_it_is_served(serve):
    s = await serve(['<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'])
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice="required")
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.tool_calls[0].function.name == "f"


async def test_structured_output_is_checked_and_ends_where_the_document_does(serve):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    s = await serve(['{"a":1} and then some chatter', '{"a": "one"}', '{"a":'])
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, response_format=fmt)
    assert r.choices[0].message.content == '{"a":1}' and r.choices[0].finish_reason == "stop"
    for _ in range(2):  # a value the schema refuses; a document cut short
        with pytest.raises(openai.InternalServerError) as err:
            await client(s).chat.completions.create(model=MODEL, messages=USER, response_format=fmt)
        assert "grammar" in str(err.value)


async def test_on_messages_too(serve):
    s = await serve(["No tool for you."])
    with pytest.raises(anthropic_util.anthropic.APIStatusError) as err:
        await anthropic_util.sdk(s).messages.create(model=MODEL, max_tokens=100, messages=USER,
                                                   tools=[{"name": "f", "input_schema": {"type": "object"}}],
                                                   tool_choice={"type": "any"})
    assert err.value.status_code == 500 and "does not fit" in str(err.value)
