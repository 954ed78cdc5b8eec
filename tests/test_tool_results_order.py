"""Tool results sent in another order than their calls (a client that appends each as its call finishes) reach
the template in the calls' order, on every protocol: the APIs pair a result with its call by id (Ollama: by id,
else by tool name), and most templates write results without ids (Qwen's ``<tool_response>``), so the model
pairs them by position."""

from __future__ import annotations

import anthropic
import httpx
import pytest

import strict
from backends import Recording
from chat_helpers import MODEL, TOOLS, USER, client
from tinytitan.engine.backends.scripted import ScriptEntry

CITIES = {"call_a": "Paris", "call_b": "Rome", "call_c": "Oslo"}  # in the order of the calls
SENT = ["call_c", "call_a", "call_b"]  # the order the results come back in
RESULT = {"call_a": "Paris: 20C", "call_b": "Rome: 25C", "call_c": "Oslo: 5C"}


async def chat(s, order: list[str]) -> None:
    turn = {"role": "assistant", "content": None,
            "tool_calls": [{"id": i, "type": "function",
                            "function": {"name": "get_weather", "arguments": f'{{"city": "{c}"}}'}}
                           for i, c in CITIES.items()]}
    messages = USER + [turn] + [{"role": "tool", "tool_call_id": i, "content": RESULT[i]} for i in order]
    r = await client(s).chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    strict.chat_completion(r.model_dump())


async def messages(s, order: list[str]) -> None:
    c = anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0)
    turn = {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "get_weather",
                                              "input": {"city": c}} for i, c in CITIES.items()]}
    results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": RESULT[i]}
                                           for i in order]}
    tools = [{"name": "get_weather", "description": "Weather for a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    r = await c.messages.create(model=MODEL, max_tokens=16, tools=tools,
                                messages=[{"role": "user", "content": "hi"}, turn, results])
    anthropic.types.Message.model_validate(r.model_dump())


async def responses(s, order: list[str]) -> None:
    items = [{"role": "user", "content": "hi"}]
    items += [{"type": "function_call", "call_id": i, "name": "get_weather", "arguments": f'{{"city": "{c}"}}'}
              for i, c in CITIES.items()]
    items += [{"type": "function_call_output", "call_id": i, "output": RESULT[i]} for i in order]
    tools = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    r = await client(s).responses.create(model=MODEL, input=items, tools=tools, store=False)
    strict.response(r.model_dump())


async def ollama(s, order: list[str]) -> None:
    turn = {"role": "assistant", "content": "",
            "tool_calls": [{"id": i, "function": {"name": "get_weather", "arguments": {"city": c}}}
                           for i, c in CITIES.items()]}
    messages = USER + [turn] + [{"role": "tool", "tool_call_id": i, "content": RESULT[i]} for i in order]
    async with httpx.AsyncClient(base_url=s.base) as h:
        r = await h.post("/api/chat", json={"model": MODEL, "messages": messages, "stream": False})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("send", [chat, messages, responses, ollama], ids=lambda f: f.__name__)
async def test_results_reach_the_template_in_the_order_of_their_calls(serve, demo_tok, send):
    s = await serve(backend=Recording([ScriptEntry("Both sunny.")] * 2, demo_tok, model_id=MODEL))
    await send(s, list(CITIES))
    await send(s, SENT)
    in_order, finished = s.engine.backend.prompts
    assert finished == in_order
    assert in_order.index("Paris: 20C") < in_order.index("Rome: 25C") < in_order.index("Oslo: 5C")
