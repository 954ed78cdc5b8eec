"""input_items lists tool calls and outputs as the API's ResponseItem: the SDK's models for a custom tool's call
and output, a client tool search's call and output, and a function call (or output) sent with ``status: null``
require a status (and an output, an execution); the server listed them as sent, so the list did not validate
against the SDK (the serve fixture checks every reply strictly)."""

from __future__ import annotations

from responses_helpers import MODEL, client

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "custom", "name": "g"},
         {"type": "tool_search", "execution": "client"}]
INPUT = [
    {"role": "user", "content": "q"},
    {"type": "custom_tool_call", "call_id": "c1", "name": "g", "input": "x"},
    {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
    {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "y"},
    {"type": "custom_tool_call_output", "call_id": "c2"},  # (its output is optional here)
    {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}", "status": None},
    {"type": "function_call_output", "call_id": "c3", "output": "ok", "status": None},
    {"type": "tool_search_call", "call_id": "t1", "arguments": {"query": "x"}},
    {"type": "tool_search_output", "call_id": "t1", "tools": [{"type": "function", "name": "h",
                                                               "parameters": {"type": "object"}}]},
]


async def test_listed_tool_items_are_the_apis_response_items(serve, tmp_path):
    s = await serve(["ok"], responses_store=str(tmp_path))
    c = client(s)
    r = await c.responses.create(model=MODEL, input=INPUT, tools=TOOLS)
    items = (await c.responses.input_items.list(r.id, order="asc")).data
    assert [i.type for i in items] == ["message"] + [i["type"] for i in INPUT[1:]]
    assert all(i.status == "completed" for i in items[1:])
    assert items[2].output == "done" and items[4].output == ""
    assert items[7].execution == items[8].execution == "client"
