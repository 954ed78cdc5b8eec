"""A forced call cut short by the output cap is a call with incomplete arguments — Chat: the ``tool_calls``
entry and ``finish_reason: "length"``; Responses: the item's ``status: "incomplete"``; Messages: the
``tool_use`` block and ``stop_reason: "max_tokens"`` — never its raw markup as the answer's text
(engine/decode/forced_call.py)."""

from __future__ import annotations

import json

import pytest

import anthropic_util
from responses_helpers import client as responses_client
from chat_helpers import client as chat_client

MODEL = "tinytitan-scripted"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
NAMES = ["get_weather", "get_time"]
CAPS = [1, 3, 6, 9]  # the marker alone; inside the name; the name written; inside the arguments


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("stream", [False, True])
async def test_chat_completions(serve, cap, stream):
    s = await serve([CALL])
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "weather?"}], max_tokens=cap,
              tools=[{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in NAMES],
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if stream:
        text, names, finish = "", [], None
        async for chunk in await chat_client(s).chat.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
                names += [tc.function.name for tc in ch.delta.tool_calls or [] if tc.function and tc.function.name]
    else:
        r = await chat_client(s).chat.completions.create(**kw)
        msg, finish = r.choices[0].message, r.choices[0].finish_reason
        text, names = msg.content or "", [tc.function.name for tc in msg.tool_calls or []]
    assert names == ["get_weather"] and finish == "length" and "<tool_call>" not in text and text == ""


@pytest.mark.parametrize("cap", CAPS)
async def test_responses(serve, cap):
    s = await serve([CALL])
    r = await responses_client(s).responses.create(
        model=MODEL, input="weather?", store=False, max_output_tokens=cap, tool_choice="required",
        tools=[{"type": "function", "name": "get_weather", "parameters": SCHEMA}])
    (item,) = r.output
    assert item.type == "function_call" and item.name == "get_weather" and item.status == "incomplete"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


async def test_required_over_several_tools_takes_the_name_the_markup_spells(serve):
    s = await serve([CALL.replace("get_weather", "get_time")])
    r = await chat_client(s).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "time?"}], max_tokens=9, tool_choice="required",
        tools=[{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in NAMES])
    assert [tc.function.name for tc in r.choices[0].message.tool_calls] == ["get_time"]
    assert r.choices[0].finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True])
async def test_messages(serve, stream):
    s = await serve([CALL])
    m = await anthropic_util.message(anthropic_util.sdk(s), stream, model=MODEL, max_tokens=3,
                                     messages=[{"role": "user", "content": "weather?"}],
                                     tools=[{"name": "get_weather", "input_schema": SCHEMA}],
                                     tool_choice={"type": "any"})
    assert [b.type for b in m.content] == ["tool_use"] and m.content[0].name == "get_weather"
    assert m.stop_reason == "max_tokens" and "<tool_call>" not in json.dumps(m.model_dump())
