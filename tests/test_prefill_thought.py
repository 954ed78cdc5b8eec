"""A prefill that opens a thought: the answer goes on inside it (reasoning), and its closing marker is never text."""

from __future__ import annotations

import httpx
import pytest

import strict
from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
ASK = {"role": "user", "content": "Count to five."}
THOUGHT = "Let me count.</think>\n\nOne, two, three."


@pytest.fixture
async def server(serve, demo_tok):
    return await serve(backend=Recording([ScriptEntry(THOUGHT)] * 8, demo_tok, model_id=MODEL))


async def test_a_prefill_that_opens_a_thought_is_continued_as_reasoning(server):
    """R1-style clients prefill ``<think>`` to make the model reason: the prompt then ends inside a thought
    (``starts_in_reasoning``), so what follows is reasoning up to ``</think>`` — never the marker as text."""
    prefill = {"role": "assistant", "content": "<think>"}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/api/chat"), json={"model": MODEL, "stream": False, "think": True,
                                                         "messages": [ASK, prefill]})
        assert r.status_code == 200, r.text
        assert server.engine.backend.prompts[-1].endswith("<think>")
        message = r.json()["message"]
        assert (message.get("thinking"), message["content"]) == ("Let me count.", "One, two, three."), r.text
        r = await c.post(server.url("/v1/chat/completions"), json={
            "model": MODEL, "continue_final_message": True, "messages": [ASK, {**prefill, "content": "<think>\nHmm, "}]})
        assert r.status_code == 200, r.text
        m = strict.chat_completion(r.json()).choices[0].message
        assert "</think>" not in m.content and m.content == "One, two, three.", r.text
        assert r.json()["choices"][0]["message"].get("reasoning_content") == "Let me count.", r.text
