"""A prefill on the "-fast" path: one whose text the path strips away is no longer continued."""

from __future__ import annotations

import httpx
import pytest

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
ASK = {"role": "user", "content": "Count to five."}
THOUGHT = "Let me count.</think>\n\nOne, two, three."


@pytest.fixture
async def server(serve, demo_tok):
    return await serve(backend=Recording([ScriptEntry(THOUGHT)] * 8, demo_tok, model_id=MODEL))


async def test_a_fast_prefill_that_is_stripped_away_opens_a_new_turn(server):
    """The "-fast" path drops a turn left without text (scaffolding only): a prefill dropped so is no longer
    the final message, and the user's turn must not be continued in its place."""
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/api/chat"), json={
            "model": MODEL + "-fast", "stream": False,
            "messages": [ASK, {"role": "assistant", "content": "<system-reminder>be brief</system-reminder>"}]})
    assert r.status_code == 200, r.text
    prompt = server.engine.backend.prompts[-1]
    assert "Count to five.<|im_end|>" in prompt and prompt.rstrip().endswith("</think>"), prompt[-80:]
