"""The Responses API through the official openai SDK: create, stream, retrieve, delete, input items,
previous_response_id chains, tool round trips (plain and namespaced), reasoning, the output cap."""

from __future__ import annotations

import json

import openai
import pytest

from responses_helpers import MODEL, client, get, post, record_prompts, sse_events

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
           "strict": False}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


async def test_create_non_stream_object(serve):
    s = await serve(["<think>Let me think.</think>Hello there."])
    r = await client(s).responses.create(model=MODEL, input="hi", instructions="Be brief.", metadata={"k": "v"},
                                         max_output_tokens=100, temperature=0.2)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status == "completed" and r.error is None and r.incomplete_details is None
    assert r.model == MODEL and r.instructions == "Be brief." and r.metadata == {"k": "v"}
    assert r.max_output_tokens == 100 and r.temperature == 0.2 and r.top_p == 0.95
    assert r.store is True and r.truncation == "disabled" and r.tool_choice == "auto" and r.tools == []
    assert r.completed_at is not None and r.created_at <= r.completed_at
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "Let me think."
    assert r.output_text == "Hello there."
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert r.usage.input_tokens_details.cached_tokens == 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    raw = (await post(s, "/v1/responses", {"model": MODEL, "input": "hi"})).json()
    documented = {"id", "object", "created_at", "completed_at", "status", "background", "conversation", "error",
                  "incomplete_details", "instructions", "max_output_tokens", "max_tool_calls", "model", "output",
                  "parallel_tool_calls", "previous_response_id", "prompt", "prompt_cache_key",
                  "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
                  "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p", "presence_penalty",
                  "frequency_penalty", "truncation", "usage", "user", "metadata"}
    assert documented <= set(raw), documented - set(raw)


async def test_stream_and_non_stream_agree(serve):
    s = await serve(["<think>a</think>Same answer.", "<think>a</think>Same answer."])
    c = client(s)
    async with c.responses.stream(model=MODEL, input="hi") as stream:
        kinds = [ev.type async for ev in stream]
        final = await stream.get_final_response()
    assert final.output_text == "Same answer." and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    stored = (await get(s, f"/v1/responses/{final.id}")).json()  # GET: the response inside the last event
    assert stored == final.model_dump(mode="json", exclude_unset=True, exclude={"output"}) | {"output": stored["output"]}
    plain = (await post(s, "/v1/responses", {"model": MODEL, "input": "hi"})).json()

    def shape(obj):  # ids and times differ between two responses; nothing else may
        drop = {"id", "created_at", "completed_at"}
        if isinstance(obj, dict):
            return {k: shape(v) for k, v in obj.items() if k not in drop}
        return [shape(v) for v in obj] if isinstance(obj, list) else obj

    assert shape(plain) == shape(stored)


async def test_retrieve_delete_cancel(serve):
    s = await serve(["One."])
    c = client(s)
    r = await c.responses.create(model=MODEL, input="hi")
    assert (await c.responses.retrieve(r.id)).output_text == "One."
    with pytest.raises(openai.BadRequestError) as e:
        await c.responses.cancel(r.id)
    assert e.value.body["message"].startswith("Cannot cancel a synchronous response.")  # the API's own sentence
    assert "background" in e.value.message
    await c.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        await c.responses.retrieve(r.id)
    assert e.value.body["message"].startswith(f"Response with id '{r.id}' not found.")  # …and so is this one
    with pytest.raises(openai.NotFoundError):
        await c.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        await c.responses.cancel("resp_nothing")


async def test_retrieve_stream_replays_events(serve):
    s = await serve(["Replayed."])
    live = await sse_events(s, {"model": MODEL, "input": "hi", "stream": True})
    rid = live[0][1]["response"]["id"]
    async with __import__("httpx").AsyncClient() as h:
        resp = await h.get(s.url(f"/v1/responses/{rid}"), params={"stream": "true", "starting_after": "2"})
    lines = [json.loads(ln[6:]) for ln in resp.text.splitlines() if ln.startswith("data: ")]
    assert lines == [d for _, d in live if d["sequence_number"] > 2]


async def test_input_items_pagination(serve):
    s = await serve(["ok"])
    c = client(s)
    items = [{"type": "message", "role": "user", "content": f"m{i}"} for i in range(5)]
    r = await c.responses.create(model=MODEL, input=items)
    page = await c.responses.input_items.list(r.id, limit=2, order="asc")
    texts = [i.content[0].text for i in page.data]
    assert texts == ["m0", "m1"] and page.has_more and page.first_id == page.data[0].id
    page2 = await c.responses.input_items.list(r.id, limit=2, order="asc", after=page.last_id)
    assert [i.content[0].text for i in page2.data] == ["m2", "m3"] and page2.has_more
    page3 = await c.responses.input_items.list(r.id, limit=2, order="asc", after=page2.last_id)
    assert [i.content[0].text for i in page3.data] == ["m4"] and not page3.has_more
    desc = await c.responses.input_items.list(r.id)
    assert [i.content[0].text for i in desc.data] == ["m4", "m3", "m2", "m1", "m0"]
    raw = (await get(s, f"/v1/responses/{r.id}/input_items", params={"limit": 1})).json()
    assert raw["object"] == "list" and raw["limit"] == 1 and raw["order"] == "desc" and raw["has_more"]
    all_pages = [i.id async for i in c.responses.input_items.list(r.id, limit=2)]  # the SDK's auto-paging
    assert len(all_pages) == 5
    ids = [i.id for i in (await c.responses.input_items.list(r.id, order="asc")).data]
    back = (await get(s, f"/v1/responses/{r.id}/input_items",  # older SDKs page backwards
                      params={"order": "asc", "before": ids[3], "limit": 2})).json()
    assert [i["id"] for i in back["data"]] == ids[1:3] and back["has_more"]
    between = (await get(s, f"/v1/responses/{r.id}/input_items",
                         params={"order": "asc", "after": ids[0], "before": ids[4]})).json()
    assert [i["id"] for i in between["data"]] == ids[1:4] and not between["has_more"]
    for params, param in [({"limit": 0}, "limit"), ({"limit": "x"}, "limit"), ({"order": "up"}, "order"),
                          ({"after": "nope"}, "after"), ({"before": "nope"}, "before")]:
        bad = await get(s, f"/v1/responses/{r.id}/input_items", params=params)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param


async def test_input_items_list_ordinary_input_as_the_sdk_reads_it(serve):
    """An assistant turn sent as a string or as output_text parts is listed with its ``annotations``; a user's
    ``text`` part as ``input_text``: every listing validates strictly. A function call without ``arguments`` or
    an item of an unknown ``status`` is refused by name, as the API does."""
    import strict

    s = await serve(["ok"] * 3)
    c = client(s)
    said = [{"role": "user", "content": [{"type": "text", "text": "q"}]}, {"role": "assistant", "content": "a"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
            {"role": "user", "content": "hi"}]
    r = await c.responses.create(model=MODEL, input=said)
    listed = (await get(s, f"/v1/responses/{r.id}/input_items", params={"order": "asc"})).json()
    strict.response_item_list(listed)
    assert [p["type"] for i in listed["data"] for p in i["content"]] == ["input_text", "output_text", "output_text",
                                                                        "input_text"]
    assert listed["data"][1]["content"][0]["annotations"] == []
    for item, param in [({"type": "function_call", "call_id": "c1", "name": "f"}, "input[1].arguments"),
                        ({"type": "message", "role": "user", "content": "x", "status": "bogus"}, "input[1].status")]:
        bad = await post(s, "/v1/responses", {"model": MODEL, "input": [{"role": "user", "content": "q"}, item]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, bad.text


async def test_previous_response_id_chain(serve):
    s = await serve(["First answer.", "Second answer.", "Third answer."])
    prompts = record_prompts(s)
    c = client(s)
    r1 = await c.responses.create(model=MODEL, input="Question one", instructions="SYSTEM-ONE")
    r2 = await c.responses.create(model=MODEL, input="Question two", previous_response_id=r1.id)
    r3 = await c.responses.create(model=MODEL, input="Question three", previous_response_id=r2.id,
                                  instructions="SYSTEM-THREE")
    assert r3.previous_response_id == r2.id
    msgs = [(m.role, m.content) for m in prompts[2].req.messages]
    assert msgs == [("system", "SYSTEM-THREE"), ("user", "Question one"), ("assistant", "First answer."),
                    ("user", "Question two"), ("assistant", "Second answer."), ("user", "Question three")]
    assert "SYSTEM-ONE" not in prompts[1].prompt_text  # instructions are not carried over
    with pytest.raises(openai.BadRequestError) as e:  # the API's own: 400, previous_response_not_found
        await c.responses.create(model=MODEL, input="x", previous_response_id="resp_missing")
    assert e.value.body["param"] == "previous_response_id" and e.value.body["code"] == "previous_response_not_found"
    assert e.value.body["message"].startswith("Previous response with id 'resp_missing' not found.")
    await c.responses.delete(r1.id)
    with pytest.raises(openai.BadRequestError) as e:
        await c.responses.create(model=MODEL, input="x", previous_response_id=r2.id)
    assert r1.id in e.value.message


async def test_store_false_keeps_nothing(serve):
    s = await serve(["x"])
    c = client(s)
    r = await c.responses.create(model=MODEL, input="hi", store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        await c.responses.retrieve(r.id)


async def test_tool_round_trip(serve):
    s = await serve([CALL, "It is sunny in Paris."])
    prompts = record_prompts(s)
    c = client(s)
    r1 = await c.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER])
    call = r1.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.namespace is None
    assert json.loads(call.arguments) == {"city": "Paris"} and call.status == "completed"
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    # Codex's way: the whole history sent back, the call exactly as received, then its output
    history = [{"type": "message", "role": "user", "content": "Weather in Paris?"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"}]
    r2 = await c.responses.create(model=MODEL, input=history, tools=[WEATHER], store=False)
    assert r2.output_text == "It is sunny in Paris."
    msgs = prompts[1].req.messages
    assert msgs[1].role == "assistant" and msgs[1].tool_calls[0].name == "get_weather"
    assert msgs[2].role == "tool" and msgs[2].content == "sunny, 21C" and msgs[2].name == "get_weather"
    assert '"name": "get_weather"' in prompts[1].prompt_text and "sunny, 21C" in prompts[1].prompt_text
    # the same through previous_response_id, output as input_text parts
    r3 = await c.responses.create(model=MODEL, previous_response_id=r1.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id,
         "output": [{"type": "input_text", "text": "rainy"}]}])
    assert [m.role for m in prompts[2].req.messages] == ["user", "assistant", "tool"]
    assert r3.status == "completed"


async def test_namespace_tools_flattened_and_mapped_back(serve):
    flat = '<tool_call>{"name": "mcp__files__read_file", "arguments": {"path": "a.txt"}}</tool_call>'
    s = await serve([flat, "Done."])
    prompts = record_prompts(s)
    c = client(s)
    tools = [WEATHER, {"type": "namespace", "name": "mcp__files__", "description": "file tools", "tools": [
        {"type": "function", "name": "read_file", "description": "Read a file",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]},
        {"type": "web_search"}]
    r = await c.responses.create(model=MODEL, input="read a.txt", tools=tools)
    assert [t.name for t in prompts[0].req.tools] == ["get_weather", "mcp__files__read_file"]
    assert "web_search" not in prompts[0].prompt_text
    call = r.output[0]
    assert call.type == "function_call" and call.name == "read_file" and call.namespace == "mcp__files__"
    assert r.tools[1].type == "namespace"  # tools echoed as sent
    r2 = await c.responses.create(model=MODEL, tools=tools, input=[
        call.model_dump(exclude_none=True), {"type": "function_call_output", "call_id": call.call_id, "output": "hi"}])
    assert prompts[1].req.messages[0].tool_calls[0].name == "mcp__files__read_file"
    assert r2.output_text == "Done."


async def test_streamed_namespace_call_event(serve):
    s = await serve(['<tool_call>{"name": "ns__f", "arguments": {}}</tool_call>'])
    events = await sse_events(s, {"model": MODEL, "input": "x", "stream": True, "tools": [
        {"type": "namespace", "name": "ns", "description": "", "tools": [{"type": "function", "name": "f"}]}]})
    added = next(d for n, d in events if n == "response.output_item.added")
    assert added["item"]["name"] == "f" and added["item"]["namespace"] == "ns"


async def test_reasoning_effort_none_turns_thinking_off(serve):
    s = await serve(["plain", "plain", "plain"])
    prompts = record_prompts(s)
    c = client(s)
    await c.responses.create(model=MODEL, input="hi", reasoning={"effort": "none"})
    await c.responses.create(model=MODEL, input="hi", reasoning={"effort": "minimal"})
    r = await c.responses.create(model=MODEL, input="hi", reasoning={"effort": "high", "summary": "auto"})
    assert prompts[0].prompt_text.endswith("<think>\n\n</think>\n\n")
    assert prompts[1].prompt_text.endswith("<think>\n\n</think>\n\n")
    assert not prompts[2].prompt_text.endswith("</think>\n\n")
    assert r.reasoning.effort == "high" and r.reasoning.summary == "auto"


async def test_output_cap_incomplete(serve):
    s = await serve(["This answer is much longer than three tokens, surely."])
    r = await client(s).responses.create(model=MODEL, input="hi", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.usage.output_tokens == 3


async def test_a_call_cut_by_the_cap_is_incomplete(serve):
    """A client must not run a call whose arguments the cap cut: the item says ``incomplete``, stream and fold."""
    cut = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris, the capital of France"}}</tool_call>'
    s = await serve([cut, cut, CALL])
    r = await client(s).responses.create(model=MODEL, input="hi", tools=[WEATHER], max_output_tokens=18)
    assert r.status == "incomplete" and r.output[-1].type == "function_call"
    assert r.output[-1].status == "incomplete" and r.output[-1].arguments.startswith('{"city": "')
    events = await sse_events(s, {"model": MODEL, "input": "hi", "tools": [WEATHER], "stream": True,
                                  "max_output_tokens": 18})
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done[-1]["type"] == "function_call" and done[-1]["status"] == "incomplete"
    assert events[-1][0] == "response.incomplete"
    whole = await client(s).responses.create(model=MODEL, input="hi", tools=[WEATHER])  # uncut: completed
    assert whole.output[-1].status == "completed" and json.loads(whole.output[-1].arguments) == {"city": "Paris"}


async def test_failure_after_stream_opened(serve):
    s = await serve([{"output": "Partial", "error": "the model fell over"}, {"output": "x", "error": "boom"}])
    events = await sse_events(s, {"model": MODEL, "input": "hi", "stream": True})
    assert events[-1][0] == "response.failed"
    resp = events[-1][1]["response"]
    assert resp["status"] == "failed" and "fell over" in resp["error"]["message"]
    assert resp["error"]["code"] == "server_error"
    assert resp["output"][0]["status"] == "incomplete" and resp["output"][0]["content"][0]["text"] == "Partial"
    r = await client(s).responses.create(model=MODEL, input="hi")  # non-stream: the same object, in-band
    assert r.status == "failed" and "boom" in r.error.message


async def test_item_reference(serve):
    s = await serve(["Stored answer.", "ok"])
    prompts = record_prompts(s)
    c = client(s)
    r1 = await c.responses.create(model=MODEL, input="Remember this")
    r2 = await c.responses.create(model=MODEL, input=[
        {"type": "item_reference", "id": r1.output[0].id}, {"role": "user", "content": "and?"}])
    assert [(m.role, m.content) for m in prompts[1].req.messages] == [("assistant", "Stored answer."),
                                                                      ("user", "and?")]
    assert r2.status == "completed"
    resp = await post(s, "/v1/responses", {"model": MODEL, "input": [{"type": "item_reference", "id": "msg_nope"}]})
    assert resp.status_code == 404 and resp.json()["error"]["param"] == "input[0].id"


async def test_developer_and_system_items_merge_into_system(serve):
    s = await serve(["ok"])
    prompts = record_prompts(s)
    await client(s).responses.create(model=MODEL, instructions="INSTR", input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "DEV"}]},
        {"type": "message", "role": "system", "content": "SYS"},
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yo"},
                                                            {"type": "refusal", "refusal": "no"}]},
        {"type": "message", "role": "developer", "content": "LATE"},
        {"type": "message", "role": "user", "content": "again"}])
    msgs = [(m.role, m.content) for m in prompts[0].req.messages]
    # instructions and every system/developer item, wherever it stands, join the one system message
    assert msgs[0] == ("system", "INSTR\n\nDEV\n\nSYS\n\nLATE")
    assert msgs[1:] == [("user", "hi"), ("assistant", "yo\nno"), ("user", "again")]


async def test_codex_style_request(serve):
    """What Codex sends: streaming, store false, include, parallel tool calls, cache key, namespace and hosted
    tools, client_metadata, a developer prompt and no instructions."""
    s = await serve(["Hi from the model."])
    body = {
        "model": MODEL, "stream": True, "store": False, "include": ["reasoning.encrypted_content"],
        "parallel_tool_calls": True, "prompt_cache_key": "thread-1", "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"}, "text": {"verbosity": "low"},
        "client_metadata": {"x": "y"}, "service_tier": "default", "safety_identifier": "u1", "truncation": "auto",
        "tools": [
            {"type": "function", "name": "exec_command", "description": "run", "strict": False,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"],
                            "additionalProperties": False}},
            {"type": "namespace", "name": "mcp__x__", "description": "", "tools": [{"type": "function", "name": "y"}]},
            {"type": "web_search"}, {"type": "tool_search"},
            {"type": "custom", "name": "apply_patch", "description": "patch",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}],
        "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
    }
    events = await sse_events(s, body)
    assert events[-1][0] == "response.completed"
    resp = events[-1][1]["response"]
    assert resp["store"] is False and resp["prompt_cache_key"] == "thread-1" and resp["text"]["verbosity"] == "low"
    assert resp["truncation"] == "auto" and resp["safety_identifier"] == "u1"


async def test_sdk_stream_with_reasoning_text_and_calls(serve):
    """The SDK's stream accumulator checks item identities, indices and part order: it must accept ours."""
    raw = ('<think>Plan.</think>Let me look.' + CALL +
           '<tool_call>{"name": "mcp__files__read_file", "arguments": {"path": "b"}}</tool_call>')
    s = await serve([raw])
    tools = [WEATHER, {"type": "namespace", "name": "mcp__files__", "description": "", "tools": [
        {"type": "function", "name": "read_file", "parameters": {"type": "object"}}]}]
    async with client(s).responses.stream(model=MODEL, input="go", tools=tools) as stream:
        seen = [ev async for ev in stream]
        final = await stream.get_final_response()
    snapshots = [ev.snapshot for ev in seen if ev.type == "response.function_call_arguments.delta"]
    assert snapshots and snapshots[-1] in (final.output[2].arguments, final.output[3].arguments)
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert (final.output[3].name, final.output[3].namespace) == ("read_file", "mcp__files__")
    assert [ev.sequence_number for ev in seen] == list(range(len(seen)))


@pytest.mark.parametrize("reasoning", [None, {"summary": "auto"}, {"summary": "detailed"},
                                       {"generate_summary": "concise"}])
async def test_a_reasoning_summary_is_the_thought_where_one_is_asked(serve, reasoning):
    """``reasoning.summary``: each reasoning item carries its thought as its one ``summary_text`` part, streamed
    as ``response.reasoning_summary_*`` events as the thought comes (what Codex shows); unasked, none."""
    import strict

    thought = "First the plan, then the answer."
    s = await serve([f"<think>{thought}</think>Done."] * 3)
    body = {"model": MODEL, "input": "hi", "stream": True, **({"reasoning": reasoning} if reasoning else {})}
    events = await sse_events(s, body)
    for _, data in events:
        strict.response_event(data)
    kinds = [n for n, _ in events]
    (item,) = [d["item"] for n, d in events if n == "response.output_item.done" and d["item"]["type"] == "reasoning"]
    summary_events = [n for n in kinds if n.startswith("response.reasoning_summary")]
    if reasoning is None:
        assert item["summary"] == [] and summary_events == []
    else:
        assert item["summary"] == [{"type": "summary_text", "text": thought}]
        deltas = "".join(d["delta"] for n, d in events if n == "response.reasoning_summary_text.delta")
        assert deltas == thought
        assert summary_events[0] == "response.reasoning_summary_part.added"
        assert summary_events[-2:] == ["response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]
        assert kinds.index("response.reasoning_summary_part.done") < kinds.index("response.output_text.delta")
    # the SDK's own stream accumulator takes the events, and the non-streamed answer is their fold
    async with client(s).responses.stream(model=MODEL, input="hi", **({"reasoning": reasoning} if reasoning else {})) \
            as stream:
        final = await stream.get_final_response()
    assert [p.text for p in final.output[0].summary] == ([thought] if reasoning else [])
    plain = await client(s).responses.create(model=MODEL, input="hi", **({"reasoning": reasoning} if reasoning else {}))
    assert [p.text for p in plain.output[0].summary] == ([thought] if reasoning else [])


@pytest.mark.parametrize("sent,echoed", [
    ({"type": "function", "function": {"name": "f"}}, {"type": "function", "name": "f"}),  # Chat's spelling
    ({"type": "function", "name": "f"}, {"type": "function", "name": "f"}),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function",
                                                                                "function": {"name": "f"}}]}},
     {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}),
])
async def test_tool_choice_is_echoed_in_the_responses_spelling(serve, sent, echoed):
    """tool_choice is read in either API's spelling; the Response echoes the one its SDK model holds, in the
    body and in every event."""
    import strict

    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
    s = await serve(['<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'] * 2)
    body = {"model": MODEL, "input": "hi", "tools": tools, "tool_choice": sent}
    r = await post(s, "/v1/responses", body)
    assert r.status_code == 200, r.text
    strict.response(r.json())
    assert r.json()["tool_choice"] == echoed
    for _, data in await sse_events(s, {**body, "stream": True}):
        strict.response_event(data)
        if "response" in data:
            assert data["response"]["tool_choice"] == echoed


def test_listed_images_carry_the_apis_default_detail():
    """Codex's view_image output and most clients send input_image without ``detail``; the API lists it back as
    ``auto``, which the SDK's ResponseInputImage requires (in a message and in a call's output alike)."""
    import strict
    from tinytitan.protocols.responses_input import normalise_input
    from tinytitan.protocols.responses_stored import as_listed

    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    items = map(as_listed, normalise_input([
        {"role": "user", "content": [{"type": "input_text", "text": "what"}, image]},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": '{"path": "a.png"}'},
        {"type": "function_call_output", "call_id": "c1", "output": [image]}]))
    items = list(items)
    strict.response_item_list({"object": "list", "data": items, "first_id": items[0]["id"],
                               "last_id": items[-1]["id"], "has_more": False})
    assert items[0]["content"][1]["detail"] == items[2]["output"][0]["detail"] == "auto"
    assert "detail" not in image  # the request's own body is left as sent


async def test_either_spelling_of_the_in_memory_cache_retention_is_read_and_echoed_as_the_sdk_holds_it(serve):
    import strict

    s = await serve(["ok"] * 2)
    for sent in ("in-memory", "in_memory"):
        r = await post(s, "/v1/responses", {"model": MODEL, "input": "hi", "prompt_cache_retention": sent})
        assert r.status_code == 200, r.text
        strict.response(r.json())
        assert r.json()["prompt_cache_retention"] == "in_memory"
