"""A stored reasoning item sent back by its id alone is that item's thought, as the API reads it.

LangChain's ChatOpenAI(use_responses_api=True, reasoning=...) streamed builds the reasoning item it sends
back from ``response.output_item.added`` (``summary: [], content: []``, status in_progress): with the
response stored, the API looks the item up by its id (store: false is its "Item with id 'rs_…' not found.
Items are not persisted when `store` is set to false"). Read as an item with no text, the thought was left
out of the next turn: the tool loop's prompt parted from the answer as generated and the cache missed from
the thought on, every turn."""

from __future__ import annotations

import httpx

import strict
from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
FN = {"type": "function", "name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
CALL = '<think>\nRome first.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


async def test_a_stored_reasoning_item_sent_back_by_id_renders_its_thought(serve, demo_tok):
    backend = Recording([ScriptEntry(CALL), ScriptEntry("Sunny."), ScriptEntry("Still sunny.")], demo_tok,
                        model_id=MODEL)
    s = await serve(backend=backend)
    ask = {"model": MODEL, "tools": [FN], "reasoning": {"effort": "medium"}}
    question = {"role": "user", "content": "Weather in Rome?"}
    async with httpx.AsyncClient(timeout=30) as c:
        first = strict.response((await c.post(s.url("/v1/responses"), json={**ask, "input": "Weather in Rome?"})).json())
        (rs,) = [o for o in first.output if o.type == "reasoning"]
        (fc,) = [o for o in first.output if o.type == "function_call"]
        # as LangChain streamed sends it back: the item as output_item.added announced it
        sent_back = {"id": rs.id, "summary": [], "type": "reasoning", "content": [], "status": "in_progress"}
        turn = [question, sent_back,
                {"type": "function_call", "name": "get_weather", "arguments": fc.arguments, "call_id": fc.call_id,
                 "id": fc.id},
                {"type": "function_call_output", "output": "sunny", "call_id": fc.call_id}]
        second = await c.post(s.url("/v1/responses"), json={**ask, "input": turn})
        # the next turn sends the same item again (now also an input item of the second response)
        third = await c.post(s.url("/v1/responses"), json={**ask, "input": turn + [
            {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "And now?"}]})
    assert second.status_code == 200 and third.status_code == 200, (second.text, third.text)
    assert "<think>\nRome first.\n</think>" in backend.prompts[1], backend.prompts[1]
    # generated as the first answer: the second prompt reads it back token for token
    assert backend.prompts[1].startswith(backend.prompts[0] + "<think>\nRome first.\n</think>"), backend.prompts[1]
