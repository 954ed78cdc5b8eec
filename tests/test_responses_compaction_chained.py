"""A compaction_trigger turn is a response like any other: stored (store defaults to true), retrieved, its input
listed, and chained from. What a later turn reads through its id is the standing prompt and the summary, not the
conversation the summary replaced (the API's guide: with previous_response_id the compaction item carries the
context, and the client prunes nothing)."""

from __future__ import annotations

import httpx
from httpx_ws import aconnect_ws

from responses_helpers import MODEL, client, record_prompts
from compaction_helpers import HISTORY, SHORT, payload
from websocket_helpers import create, turn

DEVELOPER = {"type": "message", "role": "developer", "content": "You are a careful coding agent."}


async def test_a_compaction_trigger_response_is_stored_and_chained_from(serve):
    s = await serve([SHORT, "Fixed it."])
    prompts = record_prompts(s)
    c = client(s)
    compacted = await c.responses.create(model=MODEL, input=[DEVELOPER, *HISTORY, {"type": "compaction_trigger"}])
    assert [o.type for o in compacted.output] == ["compaction"]
    stored = await c.responses.retrieve(compacted.id)
    assert stored.status == "completed" and stored.output[0].model_dump() == compacted.output[0].model_dump()
    listed = await c.responses.input_items.list(compacted.id, order="asc")  # (the trigger is no ResponseItem)
    assert [i.type for i in listed.data] == ["message", "message", "message", "function_call", "function_call_output"]

    reply = await c.responses.create(model=MODEL, previous_response_id=compacted.id, input="Now run the tests.")
    assert reply.output_text == "Fixed it."
    prompt = prompts[-1].prompt_text
    assert SHORT in prompt and "Now run the tests." in prompt and "careful coding agent" in prompt
    assert "retrun 1" not in prompt and "Looking at it." not in prompt  # superseded by the summary


async def test_over_the_socket_a_compaction_trigger_response_is_chained_from(serve):
    s = await serve(["Looking at it.", SHORT, "Fixed it."])
    prompts = record_prompts(s)
    async with httpx.AsyncClient() as h:
        async with aconnect_ws(s.url("/v1/responses"), h) as ws:
            await ws.send_text(create(input="Fix the bug in src/app.py please.", store=False))
            first = (await turn(ws))[-1]["response"]["id"]
            await ws.send_text(create(input=[{"type": "compaction_trigger"}], previous_response_id=first, store=False))
            frames = await turn(ws)
            assert payload(frames[-1]["response"]["output"][0])["summary"] == SHORT
            await ws.send_text(create(input="Now run the tests.", previous_response_id=frames[-1]["response"]["id"],
                                      store=False))
            last = await turn(ws)
    assert last[-1]["type"] == "response.completed", last[-1]
    prompt = prompts[-1].prompt_text
    assert SHORT in prompt and "Now run the tests." in prompt and "Looking at it." not in prompt
