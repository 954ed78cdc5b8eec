"""The reasoning switch in the spellings agents send an "OpenAI-compatible" provider (pi's ``thinkingFormat``):
DashScope's and Z.ai's top-level ``enable_thinking`` (qwen, zai), DeepSeek's ``thinking.type`` beside
``reasoning_effort`` (deepseek), OpenRouter's ``reasoning.effort`` (openrouter) — each with the meaning of the
``reasoning_effort`` / ``chat_template_kwargs`` it stands for, never an unknown parameter; a malformed one named."""

from __future__ import annotations

import json

import openai
import pytest

import strict
from chat_helpers import MODEL, USER, client

# what pi 0.73.1's openai-completions provider sends for each thinkingFormat, thinking on / off
PI_BODIES = [
    ({"enable_thinking": True}, True),  # qwen, zai
    ({"enable_thinking": False}, False),
    ({"thinking": {"type": "enabled"}, "reasoning_effort": "high"}, True),  # deepseek
    ({"thinking": {"type": "enabled"}}, True),
    ({"thinking": {"type": "disabled"}}, False),
    ({"reasoning": {"effort": "high"}}, True),  # openrouter
    ({"reasoning": {"effort": "none"}}, False),
    ({"reasoning": {"enabled": False}}, False),
    # the OpenAI and vLLM spellings come first where several are sent, as between those two today
    ({"reasoning_effort": "none", "enable_thinking": True}, False),
    ({"chat_template_kwargs": {"enable_thinking": False}, "reasoning": {"effort": "high"}}, False),
    ({"reasoning_effort": "none", "thinking": {"type": "enabled"}}, False),
]


@pytest.mark.parametrize("body, thinks", PI_BODIES, ids=lambda b: json.dumps(b) if isinstance(b, dict) else str(b))
async def test_each_spelling_sets_the_template_s_switch(serve, body, thinks):
    s = await serve(["ok", "ok"])
    proto = s.server.protocols["openai_chat"]
    req = proto.chat_request(proto.validate(json.dumps({"model": MODEL, "messages": USER, **body}).encode()))
    prepared = await s.engine.prepare(req)
    assert prepared.prompt_text.endswith("<think>\n\n</think>\n\n") != thinks
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, extra_body=body)
    assert strict.chat_completion(r.model_dump()).choices[0].message.content == "ok"


@pytest.mark.parametrize("body, param", [
    ({"enable_thinking": "yes"}, "enable_thinking"),
    ({"thinking": {"type": "auto"}}, "thinking"),
    ({"thinking": {}}, "thinking"),
    ({"reasoning": {"effort": "high", "exclude": True}}, "reasoning"),
    ({"reasoning": "high"}, "reasoning"),
])
async def test_a_malformed_spelling_is_refused_naming_it(serve, body, param):
    s = await serve(["ok"])
    with pytest.raises(openai.BadRequestError) as e:
        await client(s).chat.completions.create(model=MODEL, messages=USER, extra_body=body)
    err = strict.openai_error(e.value.response.json())
    assert err.param.startswith(param), err
