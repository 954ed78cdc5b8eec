"""Responses' reasoning.effort takes "max", the top of the API's ladder (the SDK's ReasoningEffort lists it, as
Chat's reasoning_effort and Messages' output_config.effort already take it): the Vercel AI SDK sends it for
`providerOptions.openai.reasoningEffort: "max"`, and it is read as the highest level this server has."""

from __future__ import annotations

import json

import httpx
import pytest

from backends import Asked
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
# the AI SDK's body, byte for byte as @ai-sdk/openai's responses() model sends it (forceReasoning, effort max)
AI_SDK_BODY = {"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_text", "text": "What is 2+2?"}]}],
               "max_output_tokens": 3000, "reasoning": {"effort": "max"}}


@pytest.mark.parametrize("stream", [False, True])
async def test_effort_max_is_taken_as_the_highest_level(serve, demo_tok, stream):
    backend = Asked([ScriptEntry("4")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json={**AI_SDK_BODY, **({"stream": True} if stream else {})})
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        body = next(e["response"] for e in events if e["type"] == "response.completed")
    else:
        body = r.json()
    assert body["reasoning"]["effort"] == "max"   # echoed as asked, as the API does
    assert backend.requests[0].reasoning == "max"
