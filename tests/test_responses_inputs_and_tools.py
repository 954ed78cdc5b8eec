"""Responses: a prewarm over plain HTTP answers the response object; one id twice in an input is refused as
the API refuses it; tools the response could not echo are refused naming the field; a namespace's custom tools
reach the model and their calls come back with the namespace."""

from __future__ import annotations

import json

import pytest
import trio

import strict
from responses_helpers import MODEL, client, post, record_prompts, sse_events


async def test_a_non_streamed_prewarm_answers_the_response_object_not_an_event_stream(serve):
    s = await serve(["unused", "answer"])
    prompts = record_prompts(s)
    c = client(s)
    r = await post(s, "/v1/responses", {"model": MODEL, "input": "the shared prefix",
                                        "prompt_cache_options": {"prewarm": True}})
    assert r.headers["content-type"].startswith("application/json"), r.text[:200]
    warm = strict.response(r.json())
    assert warm.status == "completed" and warm.output == [] and prompts == []
    sdk = await c.responses.create(model=MODEL, input="x", extra_body={"prompt_cache_options": {"prewarm": True}})
    assert sdk.object == "response"  # (the SDK handed back the raw SSE text as a str)
    nxt = await c.responses.create(model=MODEL, input="the question", previous_response_id=warm.id)
    assert nxt.output_text == "unused" and "the shared prefix" in prompts[0].prompt_text
    events = await sse_events(s, {"model": MODEL, "input": "x", "stream": True,  # streamed: still the events
                                  "prompt_cache_options": {"prewarm": True}})
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.completed"]


async def test_an_input_holding_one_id_twice_is_refused_as_the_api_does(serve):
    """Accepted, it made input_items' cursor ambiguous: the SDK's auto-pager looped on the second copy for ever."""
    s = await serve(["ok", "ok"])
    c = client(s)
    r1 = await c.responses.create(model=MODEL, input="hi")
    for items in ([{"type": "message", "role": "user", "content": "a", "id": "msg_1"},
                   {"type": "message", "role": "user", "content": "b", "id": "msg_1"}],
                  [{"type": "item_reference", "id": r1.output[0].id},
                   {"type": "item_reference", "id": r1.output[0].id}]):
        r = await post(s, "/v1/responses", {"model": MODEL, "input": items})
        assert r.status_code == 400, r.text[:300]
        assert r.json()["error"]["code"] == "duplicate_item" and r.json()["error"]["param"] == "input[1]"
    ok = await c.responses.create(model=MODEL, input=[{"type": "message", "role": "user", "content": "a", "id": "m1"},
                                                      {"type": "message", "role": "user", "content": "b", "id": "m2"}])
    seen = []
    with trio.fail_after(20):  # (the SDK follows the pages, one item each)
        async for item in c.responses.input_items.list(ok.id, limit=1, order="asc"):
            seen.append(item.content[0].text)
    assert seen == ["a", "b"]


@pytest.mark.parametrize("tool, param", [
    ({"name": "f", "parameters": {"type": "object"}}, "tools[0].type"),
    ({"type": "function", "name": "f", "strict": "yes"}, "tools[0].strict"),
    ({"type": "function", "name": "f", "defer_loading": 1}, "tools[0].defer_loading"),
])
async def test_a_tool_the_response_could_not_echo_is_refused_naming_the_field(serve, tool, param):
    """Accepted, the tool was left out of the prompt unseen (no type) or echoed as sent, and the Response no
    longer validated against the SDK's model."""
    s = await serve(["ok"])
    r = await post(s, "/v1/responses", {"model": MODEL, "input": "hi", "tools": [tool]})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text[:300]


async def test_a_namespaces_custom_tool_reaches_the_model_and_its_call_comes_back_with_the_namespace(serve):
    call = '<tool_call>\n{"name": "ns__patch", "arguments": {"input": "*** Begin Patch"}}\n</tool_call>'
    s = await serve([call, call, "done"])
    prompts = record_prompts(s)
    tools = [{"type": "namespace", "name": "ns", "description": "d", "tools": [
        {"type": "custom", "name": "patch", "description": "apply a patch"}, {"type": "function", "name": "f"}]}]
    r = await client(s).responses.create(model=MODEL, input="patch it", tools=tools)
    assert sorted(t.name for t in prompts[0].req.tools) == ["ns__f", "ns__patch"]
    (item,) = r.output
    assert item.type == "custom_tool_call" and item.name == "patch" and item.namespace == "ns"
    assert item.input == "*** Begin Patch"
    events = await sse_events(s, {"model": MODEL, "input": "patch it", "tools": tools, "stream": True})
    added = next(d for n, d in events if n == "response.output_item.added")["item"]
    assert added["namespace"] == "ns" and added["name"] == "patch"
    back = await client(s).responses.create(model=MODEL, tools=tools, input=[
        item.model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": item.call_id, "output": "ok"}])
    assert back.output_text == "done" and prompts[2].req.messages[0].tool_calls[0].name == "ns__patch"
