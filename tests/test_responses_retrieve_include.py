"""GET /v1/responses/{id} and its input_items take the API's ``include`` (the SDK sends ``include[]=…``): each
value is read or refused by name, never dropped unread. ``reasoning.encrypted_content`` gives a stored response's
reasoning items their thought as encrypted_content, in the object and in a replayed stream, as a create that asked
for it would have."""

from __future__ import annotations

import json

import httpx

from tinytitan.protocols.common import reasoning_payload

from responses_helpers import MODEL, client, get

THOUGHT = "<think>The user greets me.</think>Hello."


async def test_retrieve_includes_the_thought_as_encrypted_content(serve):
    s = await serve([THOUGHT])
    c = client(s)
    r = await c.responses.create(model=MODEL, input="hi")
    assert r.output[0].type == "reasoning" and r.output[0].encrypted_content is None  # (not asked for)
    got = await c.responses.retrieve(r.id, include=["reasoning.encrypted_content"])
    assert got.output[0].encrypted_content == reasoning_payload("The user greets me.")
    assert (await c.responses.retrieve(r.id)).output[0].encrypted_content is None
    async with httpx.AsyncClient() as h:
        replay = await h.get(s.url(f"/v1/responses/{r.id}"), params={"stream": "true",
                                                                     "include[]": "reasoning.encrypted_content"})
    events = [json.loads(line[6:]) for line in replay.text.splitlines() if line.startswith("data: ")]
    done = [e for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"]
    assert done and done[0]["item"]["encrypted_content"] == reasoning_payload("The user greets me.")
    assert events[-1]["response"]["output"][0]["encrypted_content"] == reasoning_payload("The user greets me.")


async def test_include_on_the_stored_routes_is_checked_by_name(serve):
    s = await serve(["Hello."])
    rid = (await client(s).responses.create(model=MODEL, input="hi")).id
    for path in (f"/v1/responses/{rid}", f"/v1/responses/{rid}/input_items"):
        ok = await get(s, path, params={"include[]": ["file_search_call.results", "message.input_image.image_url"]})
        assert ok.status_code == 200, ok.text
        bad = await get(s, path, params={"include[]": "reasoning.bogus"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "include", bad.text
        assert "reasoning.bogus" in bad.json()["error"]["message"]
    logprobs = await get(s, f"/v1/responses/{rid}", params={"include[]": "message.output_text.logprobs"})
    assert logprobs.status_code == 400 and "logprobs" in logprobs.json()["error"]["message"]
