"""gpt-oss (harmony): a message to a function the request did not allow (no tools, or tool_choice none) is the
model's text, never a call the client did not offer, as on every other family."""

from __future__ import annotations

import openai
import pytest

import family_fixtures as ff

CALL = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome"}<|call|>')
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "w",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("harmony-not-offered")


@pytest.mark.parametrize("tools", [None, "none"])
async def test_harmony_call_not_offered_is_not_a_call(serve, root, tools):
    """No tools declared (or tool_choice none): the client offered no call, so none may come back."""
    backend = ff.backend("gpt_oss", root, [CALL])
    s = await serve(backend=backend)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
    kw = {} if tools is None else {"tools": TOOLS, "tool_choice": "none"}
    r = await c.chat.completions.create(model=backend.model_id,
                                        messages=[{"role": "user", "content": "Weather in Rome?"}], **kw)
    choice = r.choices[0]
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert choice.message.content == '{"city": "Rome"}'  # what the model wrote, as its text
