"""A Responses reasoning item is the reasoning of the assistant turn right after it. A response that was only a
reasoning item (the model thought, then stopped, or the output cap cut it while thinking) has no such turn: its
thought must not be carried into a later turn of the conversation (after the next user message)."""

from __future__ import annotations

import httpx

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
FN = {"type": "function", "name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


async def test_a_lone_reasoning_item_is_not_the_next_turns_thought(serve, demo_tok):
    backend = Recording([ScriptEntry("Done.")] * 2, demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    items = [
        {"role": "user", "content": "Weather in Rome?"},
        # the first answer: a thought and nothing else (status incomplete, or an empty answer)
        {"type": "reasoning", "id": "rs_0", "summary": [],
         "content": [{"type": "reasoning_text", "text": "FIRST-TURN-THOUGHT"}]},
        {"role": "user", "content": "Please, the weather in Paris."},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Now Paris."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": items, "tools": [FN]})
    assert r.status_code == 200, r.text
    prompt = backend.prompts[-1]
    assert "<think>\nNow Paris.\n</think>" in prompt, prompt  # the loop's own thought, as generated
    assert "FIRST-TURN-THOUGHT" not in prompt, prompt  # not the earlier turn's, glued onto this one
