"""Tool search (Anthropic Messages): deferred tools, ``tool_reference`` blocks, and the prompt cache.

Claude Code 2.1.332 declares tools with ``defer_loading: true`` and answers its ToolSearch calls with a
``tool_result`` holding ``tool_reference`` blocks (tests/traces/claude/tool_search.jsonl). Deferred tools stay out
of the prompt's tool header; a reference renders the tool's definition in the family's own declaration form
inside the tool result, so loading a tool only appends to the prompt.
"""

from __future__ import annotations

import json

from anthropic_util import MODEL, assert_envelope, body, post, sdk
from tinytitan.chat_request import ChatRequest, Message, Tool
from conftest import entries
from tinytitan.engine.cache.miss import Fingerprint
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.backends.scripted import ScriptedBackend
from tool_search_helpers import (
    ECHO, ECHO_DECLARED, MCP_ECHO, PLACEHOLDER, RESPONSES_SEARCH, SEARCH, SHELL, session)

SEARCH_CALL = '<tool_call>\n{"name": "ToolSearch", "arguments": {"query": "select:mcp__demo__echo"}}\n</tool_call>'
ECHO_CALL = '<tool_call>\n{"name": "mcp__demo__echo", "arguments": {"text": "m-42"}}\n</tool_call>'


def protocol(s):
    return s.server.protocols["anthropic_messages"]


def rendered(s, payload: dict) -> str:
    proto = protocol(s)
    return s.engine.backend.render(s.engine.apply_model(proto.chat_request(proto.validator.validate(payload))))


async def test_deferred_tools_stay_out_of_the_header_and_a_reference_appends_the_definition(serve):
    s = await serve(["ok"])
    first, second, _ = session()
    before = rendered(s, body(tools=[SEARCH, PLACEHOLDER], messages=first))
    after = rendered(s, body(tools=[SEARCH, PLACEHOLDER, ECHO], messages=second))
    assert '"name": "ToolSearch"' in before and "DeferredToolPlaceholder" not in before
    assert "mcp__demo__echo" not in before.split("<|im_start|>user")[0]
    # the prompt up to the first turn is unchanged: the loaded tool is declared inside the tool result
    head = before.rsplit("<|im_start|>assistant", 1)[0]
    assert after.startswith(head)
    assert f"<tool_response>\n{ECHO_DECLARED}\n</tool_response>" in after
    assert after.count("mcp__demo__echo") == 2  # the search call's query, and the declaration
    assert "DeferredToolPlaceholder" not in after


async def test_a_tool_search_session_is_served_and_every_later_turn_hits_the_cache(serve, demo_tok):
    s = await serve(backend=ScriptedBackend(entries([SEARCH_CALL, ECHO_CALL, "The tool said m-42."]), demo_tok,
                                            prompt_cache=PromptCache(1 << 30)))
    c = sdk(s)
    first = await c.messages.create(model=MODEL, max_tokens=200, tools=[SEARCH, PLACEHOLDER],
                                    messages=[{"role": "user", "content": "echo m-42 with the demo tool"}])
    assert first.content[-1].name == "ToolSearch"
    ids = (first.content[-1].id, "")
    msgs = session(ids)[1]
    msgs[1]["content"] = [b.model_dump(exclude_none=True) for b in first.content]
    second = await c.messages.create(model=MODEL, max_tokens=200, tools=[SEARCH, PLACEHOLDER, ECHO], messages=msgs,
                                     extra_headers={"anthropic-beta": "cache-diagnosis-2026-04-07"})
    call = second.content[-1]
    assert call.type == "tool_use" and call.name == "mcp__demo__echo" and call.input == {"text": "m-42"}
    assert second.diagnostics is None  # nothing the cache held was lost
    assert second.usage.cache_read_input_tokens > 0
    msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "echoed: m-42"}]}]
    third = await c.messages.create(model=MODEL, max_tokens=200, tools=[SEARCH, PLACEHOLDER, ECHO], messages=msgs,
                                    extra_headers={"anthropic-beta": "cache-diagnosis-2026-04-07"})
    assert third.content[0].text == "The tool said m-42." and third.diagnostics is None
    assert third.usage.cache_read_input_tokens >= second.usage.input_tokens + second.usage.cache_read_input_tokens


async def test_a_reference_to_a_tool_not_offered_is_refused_naming_it(serve):
    s = await serve(["ok"])
    msgs = session()[1]
    r = await post(s, body(tools=[SEARCH, PLACEHOLDER], messages=msgs))
    assert_envelope(r, 400, "invalid_request_error", "'mcp__demo__echo'", "messages[2].content[0].content[0]")
    msgs[2]["content"][0]["content"] = [{"type": "tool_reference"}]
    r = await post(s, body(tools=[SEARCH, ECHO], messages=msgs))
    assert_envelope(r, 400, "invalid_request_error", "tool_name")


async def test_all_tools_deferred_and_server_tool_search_are_refused_by_name(serve):
    s = await serve(["ok"])
    r = await post(s, body(tools=[ECHO, PLACEHOLDER]))
    assert_envelope(r, 400, "invalid_request_error", "defer_loading")
    for kind in ("tool_search_tool_regex_20251119", "tool_search_tool_bm25_20251119"):
        r = await post(s, body(tools=[{"type": kind, "name": "tool_search"}, ECHO]))
        assert_envelope(r, 400, "invalid_request_error", kind, "tool_reference")


def test_a_deferred_tool_is_not_part_of_the_tools_fingerprint():
    search = Tool("ToolSearch", "search", {"type": "object"})
    echo = Tool("mcp__demo__echo", "echo", {"type": "object"}, deferred=True)
    user = (Message("user", "hi"),)
    assert Fingerprint.of(ChatRequest("m", user, (search,))).tools == \
        Fingerprint.of(ChatRequest("m", user, (search, echo))).tools
    loaded = Fingerprint.of(ChatRequest("m", user + (Message("tool", "", tool_call_id="t", tool_references=("x",)),)))
    plain = Fingerprint.of(ChatRequest("m", user + (Message("tool", "", tool_call_id="t"),)))
    assert loaded.messages != plain.messages


# --- Responses: a client-executed tool search (Codex's {"type": "tool_search", "execution": "client"}) ---------

RESPONSES_SEARCH_CALL = '<tool_call>\n{"name": "tool_search", "arguments": {"query": "echo"}}\n</tool_call>'


async def test_responses_client_tool_search_loads_deferred_tools_by_appending(serve, demo_tok):
    import openai

    script = [RESPONSES_SEARCH_CALL, ECHO_CALL, "The tool said m-42.", RESPONSES_SEARCH_CALL]
    s = await serve(backend=ScriptedBackend(entries(script), demo_tok, prompt_cache=PromptCache(1 << 30)))
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
    tools = [SHELL, RESPONSES_SEARCH]
    user = [{"role": "user", "content": "echo m-42 with the demo tool"}]
    first = await c.responses.create(model=MODEL, input=user, tools=tools + [{**MCP_ECHO}])
    (call,) = first.output
    assert call.type == "tool_search_call" and call.execution == "client" and call.arguments == {"query": "echo"}
    proto = s.server.protocols["openai_responses"]
    v = proto.validate(json.dumps({"model": MODEL, "input": user, "tools": tools + [MCP_ECHO]}).encode())
    prompt_one = s.engine.backend.render(proto.request_for(v, v.state.items))
    assert '"name": "tool_search"' in prompt_one and "mcp__demo__echo" not in prompt_one  # deferred: not declared
    loaded = {"type": "tool_search_output", "call_id": call.call_id, "execution": "client",
              "tools": [{k: v for k, v in MCP_ECHO.items() if k != "defer_loading"}]}
    second_input = user + [call.model_dump(exclude_none=True), loaded]
    second = await c.responses.create(model=MODEL, input=second_input, tools=tools,
                                      prompt_cache_options={"comparison_response_id": first.id})
    (echo,) = second.output
    assert echo.type == "function_call" and echo.name == "mcp__demo__echo" and json.loads(echo.arguments) == {"text": "m-42"}
    assert second.prompt_cache_diagnostics.type == "cache_hit"  # loading the tool only appended to the prompt
    assert second.usage.input_tokens_details.cached_tokens > 0
    third = await c.responses.create(
        model=MODEL, tools=tools, prompt_cache_options={"comparison_response_id": second.id},
        input=second_input + [echo.model_dump(exclude_none=True),
                              {"type": "function_call_output", "call_id": echo.call_id, "output": "echoed: m-42"}])
    assert third.output_text == "The tool said m-42." and third.prompt_cache_diagnostics.type == "cache_hit"
    # streamed: the search call is one output item, added then done
    async with await c.responses.create(model=MODEL, input=user, tools=tools, stream=True) as stream:
        events = [e async for e in stream]
    items = [(e.type, e.item.type) for e in events if e.type.startswith("response.output_item")]
    assert items == [("response.output_item.added", "tool_search_call"),
                     ("response.output_item.done", "tool_search_call")], items
    assert events[-1].response.output[0].arguments == {"query": "echo"}
