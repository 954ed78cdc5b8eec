"""The families through the whole server: a Chat Completions request over a real socket, answered by a
scripted backend on each family's fixture tokenizer — the engine picks the family's parser itself."""

from __future__ import annotations

import json

import openai
import pytest

import family_fixtures as ff

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                             "parameters": {"type": "object",
                                                            "properties": {"city": {"type": "string"},
                                                                           "days": {"type": "integer"}},
                                                            "required": ["city"]}}}]
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_x1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_x1", "content": "sunny"},
    {"role": "user", "content": "And in Rome for 2 days?"},
]
OUTPUTS = {
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n2"
                   "\n</parameter>\n</function>\n</tool_call>",
    "llama3": '{"name": "get_weather", "parameters": {"city": "Rome", "days": 2}}',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome", "days": 2}',
    "glm": "\n<think>Rome.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n"
           "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    "gemma": '```tool_code\nget_weather(city="Rome", days=2)\n```',
    "gpt_oss": "<|channel|>analysis<|message|>Rome.<|end|><|start|>assistant<|channel|>commentary "
               'to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome", "days": 2}<|call|>',
}


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families-server")


@pytest.mark.parametrize("family", list(OUTPUTS))
async def test_tool_call_through_chat_completions(serve, root, family):
    backend = ff.backend(family, root, [OUTPUTS[family]])
    s = await serve(backend=backend)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
    r = await c.chat.completions.create(model=backend.model_id, messages=HISTORY, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Rome", "days": 2}
    if family in ("glm", "gpt_oss"):
        assert choice.message.model_extra["reasoning_content"] == "Rome."

    stream = await c.chat.completions.create(model=backend.model_id, messages=HISTORY, tools=TOOLS, stream=True)
    args = ""
    async for chunk in stream:
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                args += tc.function.arguments or ""
    assert json.loads(args) == {"city": "Rome", "days": 2}
