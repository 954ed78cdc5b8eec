"""A custom tool's fields (Anthropic Messages): input_examples reach the model, unknown keys and code-only
tools are refused by name."""

from __future__ import annotations

from anthropic_util import assert_envelope, body, post

TOOL = {"name": "get_ticket", "description": "Look a ticket up.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}


def rendered(s, payload: dict) -> str:
    proto = s.server.protocols["anthropic_messages"]
    return s.engine.backend.render(s.engine.apply_model(proto.chat_request(proto.validator.validate(payload))))


async def test_input_examples_are_shown_to_the_model(serve):
    s = await serve(["ok"])
    prompt = rendered(s, body(tools=[dict(TOOL, input_examples=[{"id": "USR-12345"}])]))
    assert "USR-12345" in prompt
    r = await post(s, body(tools=[dict(TOOL, input_examples=[{"id": "USR-12345"}], eager_input_streaming=True,
                                       cache_control={"type": "ephemeral"}, allowed_callers=["direct"])]))
    assert r.status_code == 200, r.text


async def test_an_unknown_tool_key_or_a_code_only_tool_is_refused_by_name(serve):
    s = await serve(["ok"])
    r = await post(s, body(tools=[dict(TOOL, defer_loadng=True)]))  # a misspelt defer_loading
    assert_envelope(r, 400, "invalid_request_error", "tools.0.custom.defer_loadng: Extra inputs are not permitted")
    r = await post(s, body(tools=[dict(TOOL, allowed_callers=["code_execution_20250825"])]))
    assert_envelope(r, 400, "invalid_request_error", "allowed_callers", "tools[0]")
    r = await post(s, body(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]))
    assert_envelope(r, 400, "invalid_request_error", "web_search_20250305")  # still refused by its type
