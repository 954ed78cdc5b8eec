"""A forced tool choice in a conversation whose tool search loaded other tools: the references stay valid."""

from __future__ import annotations

from anthropic_util import body, post
from tool_search_helpers import ECHO, ECHO_DECLARED, PLACEHOLDER, SEARCH, session

SEARCH_CALL = '<tool_call>\n{"name": "ToolSearch", "arguments": {"query": "select:x"}}\n</tool_call>'


async def test_a_forced_tool_choice_keeps_the_tools_a_tool_search_loaded(serve):
    s = await serve([SEARCH_CALL])
    msgs = session()[1]  # a tool_result with a tool_reference to mcp__demo__echo
    forced = body(tools=[SEARCH, PLACEHOLDER, ECHO], messages=msgs,
                  tool_choice={"type": "tool", "name": "ToolSearch"})
    r = await post(s, forced)
    assert r.status_code == 200, r.text
    assert r.json()["content"][-1]["name"] == "ToolSearch"
    counted = await post(s, {k: v for k, v in forced.items() if k != "max_tokens"}, "/v1/messages/count_tokens")
    assert counted.status_code == 200, counted.text
    usage = r.json()["usage"]
    assert counted.json()["input_tokens"] == usage["input_tokens"] + usage["cache_read_input_tokens"]
    # the loaded tool is still declared in the tool result that loaded it
    proto = s.server.protocols["anthropic_messages"]
    req = s.engine.apply_model(proto.chat_request(proto.validator.validate(forced)))
    assert f"<tool_response>\n{ECHO_DECLARED}\n</tool_response>" in s.engine.backend.prepare(req).prompt_text
