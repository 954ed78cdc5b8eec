"""Request fields of the OpenAI APIs that were accepted and then did nothing: each one now either reaches the
model (a namespace's description), is refused by name (a legacy ``function_call`` or an ``audio`` answer in a
Chat history), or is echoed as the API reports it (the Response's ``service_tier``)."""

from __future__ import annotations

import httpx
import pytest

import strict
from responses_helpers import MODEL, record_prompts, sse_events

USER = [{"role": "user", "content": "hi"}]


async def _post(s, path: str, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as c:
        return await c.post(s.url(path), json={"model": MODEL, **body})


async def test_a_namespace_description_reaches_the_model(serve):
    """Codex sends each MCP server's tools as a namespace whose ``description`` says what the server is for;
    the API shows it to the model beside the namespace's functions."""
    s = await serve(["Fine."])
    prompts = record_prompts(s)
    tools = [{"type": "namespace", "name": "mcp__linear__", "description": "The ACME team's Linear issue tracker.",
              "tools": [{"type": "function", "name": "create_issue", "description": "Create an issue.",
                         "parameters": {"type": "object", "properties": {}}},
                        {"type": "function", "name": "list_issues", "parameters": {"type": "object", "properties": {}}}]}]
    r = await _post(s, "/v1/responses", {"input": "hi", "tools": tools})
    assert r.status_code == 200, r.text
    assert strict.response(r.json()).tools[0].description == "The ACME team's Linear issue tracker."  # echoed as sent
    (prepared,) = prompts
    described = {t.name: t.description for t in prepared.req.tools}
    assert described == {"mcp__linear__create_issue": "The ACME team's Linear issue tracker.\n\nCreate an issue.",
                         "mcp__linear__list_issues": "The ACME team's Linear issue tracker."}
    assert "ACME team's Linear issue tracker" in prepared.prompt_text


@pytest.mark.parametrize("message,param", [
    ({"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{}"}},
     "messages[1].function_call"),
    ({"role": "assistant", "content": None, "audio": {"id": "audio_abc"}}, "messages[1].audio"),
])
async def test_a_chat_history_turn_this_server_cannot_render_is_refused_by_name(serve, message, param):
    """The legacy ``function_call`` of an assistant turn (its ``functions`` / ``function_call`` request fields and
    ``role: function`` are refused) and an earlier audio answer were left out of the prompt: the model read an
    empty assistant turn where the call or the answer stood."""
    s = await serve(["Fine."])
    r = await _post(s, "/v1/chat/completions", {"messages": [*USER, message, *USER]})
    assert r.status_code == 400, r.text
    strict.openai_error(r.content)
    assert r.json()["error"]["param"] == param and "not supported" in r.json()["error"]["message"]


async def test_null_legacy_fields_of_an_echoed_assistant_message_are_taken(serve):
    """A client that sends back a message another server returned carries ``function_call: null`` and
    ``audio: null``: nothing there to refuse."""
    s = await serve(["Fine."])
    echoed = {"role": "assistant", "content": "Hello.", "refusal": None, "function_call": None, "audio": None,
              "tool_calls": None, "annotations": []}
    r = await _post(s, "/v1/chat/completions", {"messages": [*USER, echoed, *USER]})
    assert r.status_code == 200, r.text
    strict.chat_completion(r.json())


@pytest.mark.parametrize("sent,reported", [(None, "default"), ("auto", "default"), ("default", "default"),
                                           ("flex", "flex"), ("priority", "priority"), ("fast", "priority")])
async def test_the_response_reports_the_service_tier_that_served_it(serve, sent, reported):
    """The API: "the response body will include the service_tier value based on the processing mode actually
    used to serve the request" — 'auto' is the project's default tier, 'fast' shows as 'priority'."""
    s = await serve(["Fine."] * 2)
    body = {"input": "hi", **({"service_tier": sent} if sent else {})}
    r = await _post(s, "/v1/responses", body)
    assert r.status_code == 200, r.text
    assert strict.response(r.json()).service_tier == reported
    events = await sse_events(s, {"model": MODEL, "stream": True, **body})
    assert {data["response"]["service_tier"] for _, data in events if "response" in data} == {reported}


@pytest.mark.parametrize("tool,param", [
    ({"type": "mcp", "server_label": "deepwiki", "tunnel_id": "tun_123"}, "tools[0].tunnel_id"),
    ({"type": "mcp", "server_label": "deepwiki", "require_approval": "never"}, "tools[0].type"),
    ({"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp"}, "tools[0].server_url"),
])
async def test_every_mcp_tool_is_refused_by_name(serve, tool, param):
    """An MCP tool reached through a ``tunnel_id`` (the third way the API takes, beside ``server_url`` and
    ``connector_id``) was left out of the prompt and the request served: the client's MCP server was never
    offered to the model, and nothing said so."""
    s = await serve(["Fine."])
    r = await _post(s, "/v1/responses", {"input": "hi", "tools": [tool]})
    assert r.status_code == 400, r.text
    strict.openai_error(r.content)
    assert r.json()["error"]["param"] == param and "MCP" in r.json()["error"]["message"]


async def test_a_functions_output_schema_reaches_the_model_and_programmatic_callers_are_refused(serve):
    """``output_schema`` says what a function's output holds (the model reads its results by it); a function only
    a program may call (``allowed_callers`` without ``direct``) cannot be offered where no programmatic tool calling
    runs: refused by name, not offered to the model to call directly."""
    s = await serve(["Fine."])
    prompts = record_prompts(s)
    schema = {"type": "object", "properties": {"temp_c": {"type": "number"}}}
    fn = {"type": "function", "name": "get_weather", "description": "Weather.", "output_schema": schema,
          "parameters": {"type": "object", "properties": {}}, "allowed_callers": ["direct", "programmatic"]}
    r = await _post(s, "/v1/responses", {"input": "hi", "tools": [fn]})
    assert r.status_code == 200, r.text
    strict.response(r.json())
    (described,) = [t.description for t in prompts[0].req.tools]
    assert described == 'Weather.\n\nIts output is JSON text matching: {"type": "object", "properties": ' \
                        '{"temp_c": {"type": "number"}}}'
    refused = await _post(s, "/v1/responses", {"input": "hi", "tools": [{**fn, "allowed_callers": ["programmatic"]}]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools[0].allowed_callers", refused.text
