"""Every refusal in spec/openai_responses.yaml, and bad input: a 4xx in the OpenAI envelope naming the field,
never a 500. The SDK sees them as the right exception classes."""

from __future__ import annotations

import base64

import openai
import pytest

from tinytitan.speclang import load_protocol

from responses_helpers import MODEL, client, post

MSG = {"type": "message", "role": "user", "content": "hi"}

# (the spec rule's field, extra body fields, the param named, the code)
REFUSALS = [
    ("background", {"background": True}, "background", "unsupported_parameter"),
    ("background_options", {"background_options": {"completion_window": "soonest"}}, "background_options",
     "unsupported_parameter"),
    ("moderation", {"moderation": {}}, "moderation", "unsupported_parameter"),
    ("access_programs", {"access_programs": {"cyber": "standard"}}, "access_programs", "unsupported_parameter"),
    ("image.context_compression", {"image": {"context_compression": "enabled"}}, "image.context_compression",
     "unsupported_value"),
    ("prompt", {"prompt": {"id": "pmpt_1"}}, "prompt", "unsupported_parameter"),
    ("conversation", {"conversation": "conv_1"}, "conversation", "unsupported_parameter"),
    ("input[].type", {"input": [MSG, {"type": "computer_call_output", "call_id": "c", "output": {}}]},
     "input[1].type", "unsupported_value"),
    ("input[].content[].type", {"input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_file", "file_url": "http://x/y.pdf"}]}]},
     "input[0].content[1].type", "unsupported_content"),
    ("input[].output[].type", {"input": [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_file", "file_data": "JVBERi0="}]}]}, "input[0].output[0].type", "unsupported_content"),
    ("input[].content[].file_id", {"input": [{"type": "message", "role": "user", "content": [
        {"type": "input_image", "file_id": "file_1", "detail": "auto"}]}]}, "input[0].content[0].file_id",
     "unsupported_value"),
    ("input[].output[].file_id", {"input": [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_image", "file_id": "file_1"}]}]}, "input[0].output[0].file_id", "unsupported_value"),
    ("tools[].type", {"tools": [{"type": "function", "name": "f"}, {"type": "teleport"}]}, "tools[1].type",
     "unsupported_value"),
    ("tools[].server_url", {"tools": [{"type": "mcp", "server_label": "gh", "server_url": "https://mcp.example"}]},
     "tools[0].server_url", "unsupported_value"),
    ("tools[].connector_id", {"tools": [{"type": "mcp", "server_label": "d", "connector_id": "connector_dropbox"}]},
     "tools[0].connector_id", "unsupported_value"),
    ("tools[].tunnel_id", {"tools": [{"type": "mcp", "server_label": "t", "tunnel_id": "tun_1"}]},
     "tools[0].tunnel_id", "unsupported_value"),
    ("tools[].type mcp", {"tools": [{"type": "mcp", "server_label": "t"}]}, "tools[0].type", "unsupported_value"),
    ("tools[].container", {"tools": [{"type": "code_interpreter", "container": "cntr_123"}]}, "tools[0].container",
     "unsupported_value"),
    ("tools[].container auto", {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
     "tools[0].container", "unsupported_value"),
    ("tools[].environment.type", {"tools": [{"type": "shell", "environment": {"type": "container_auto"}}]},
     "tools[0].environment.type", "unsupported_value"),
    ("previous_response_id", {"previous_response_id": ""}, "previous_response_id", "invalid_value"),
]


def test_every_spec_refusal_is_tested():
    spec = load_protocol("openai_responses")
    assert {r["field"] for r in spec.request["refuse"]} == {f.split(" ")[0] for f, *_ in REFUSALS}


@pytest.mark.parametrize("field,extra,param,code", REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_refusal(serve, field, extra, param, code):
    s = await serve(["never generated"])
    body = {"model": MODEL, "input": "hi", **extra}
    resp = await post(s, "/v1/responses", body)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["code"] == code
    assert field.split("[")[0].split(".")[0] in err["message"] or param in err["message"] or "'" in err["message"]


BAD = [
    ({"input": "hi"}, "model", "missing_required_parameter"),  # no model
    ({"model": MODEL}, "input", "missing_required_parameter"),
    ({"model": MODEL, "input": 3}, "input", "invalid_type"),
    ({"model": MODEL, "input": "hi", "frobnicate": 1}, "frobnicate", "unknown_parameter"),
    ({"model": MODEL, "input": "hi", "temperature": 9}, "temperature", "invalid_value"),
    ({"model": MODEL, "input": "hi", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ({"model": MODEL, "input": "hi", "truncation": "sometimes"}, "truncation", "invalid_value"),
    ({"model": MODEL, "input": [7]}, "input[0]", "invalid_type"),
    ({"model": MODEL, "input": [{"type": "reasoning", "summary": []}]}, "input", "empty_input"),
    ({"model": MODEL, "input": [{"type": "item_reference"}]}, "input[0].id", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "tools": [5]}, "tools[0]", "invalid_type"),
    ({"model": MODEL, "input": [{"type": "message", "role": "wizard", "content": "x"}]}, "input[0].role",
     "invalid_value"),
    ({"model": MODEL, "input": [{"type": "message", "role": "user", "content": 5}]}, "input[0].content",
     "invalid_type"),
    ({"model": MODEL, "input": [{"type": "message", "role": "user", "content": [{"type": "input_text"}]}]},
     "input[0].content[0].text", "missing_required_parameter"),
    ({"model": MODEL, "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id",
     "missing_required_parameter"),
    ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output",
     "missing_required_parameter"),
    ({"model": MODEL, "input": [{"type": "compaction", "encrypted_content": "bm90IGpzb24="}]},
     "input[0].encrypted_content", "compaction_payload_invalid"),
    # base64 of JSON nested past the parser's depth (a RecursionError once, answered 500)
    ({"model": MODEL, "input": [{"type": "compaction", "encrypted_content": base64.b64encode(
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000).decode()}, MSG]},
     "input[0].encrypted_content", "compaction_payload_invalid"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": "x"}]},
     "tools[0].parameters", "invalid_type"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "a__b"},
                                               {"type": "namespace", "name": "a", "tools": [{"name": "b"}]}]},
     "tools[1].tools[0].name", "invalid_value"),
    # a tool's name as the API holds it, with MCP's dot (^[a-zA-Z0-9_.-]+$, at most 64), wherever a
    # tool is named
    ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "fs:read"}]}, "tools[0].name",
     "invalid_value"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "f" * 65}]}, "tools[0].name",
     "string_above_max_length"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "namespace", "name": "mcp__fs__", "tools": [
        {"type": "function", "name": "read file"}]}]}, "tools[0].tools[0].name", "invalid_value"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "namespace", "name": "my server", "tools": [
        {"type": "function", "name": "read"}]}]}, "tools[0].name", "invalid_value"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "custom", "name": "apply patch"}]}, "tools[0].name",
     "invalid_value"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "namespace", "name": "a"}]}, "tools[0].tools",
     "missing_required_parameter"),
    ({"model": MODEL, "input": [{"content": "no role, no id, no type"}]}, "input[0].type", "missing_required_parameter"),
    ({"model": MODEL, "input": [{"type": "function_call", "call_id": "", "name": "f", "arguments": "{}"}]},
     "input[0].call_id", "invalid_value"),
    ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text"}]}]},
     "input[0].output[0].text", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "tools": [{"type": "namespace", "name": "a", "tools": [{"type": "function"}]}]},
     "tools[0].tools[0].name", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
    ({"model": MODEL, "input": "hi", "tool_choice": {"type": "web_search"}}, "tool_choice.type", "unsupported_value"),
    ({"model": MODEL, "input": "hi", "tool_choice": {"type": "function", "name": "f"}}, "tool_choice", "invalid_value"),
    ({"model": MODEL, "input": "hi", "reasoning": {"effort": "galactic"}}, "reasoning.effort", "invalid_value"),
    ({"model": MODEL, "input": "hi", "text": {"verbosity": "loud"}}, "text.verbosity", "invalid_value"),
    # echoed in the Response, so checked as the API checks them (a value the Response cannot hold is the 400)
    ({"model": MODEL, "input": "hi", "metadata": {"a": 1}}, "metadata.a", "invalid_type"),
    ({"model": MODEL, "input": "hi", "service_tier": "bogus"}, "service_tier", "invalid_value"),
    ({"model": MODEL, "input": "hi", "include": ["bogus.value"]}, "include[0]", "invalid_value"),
    ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "zz", "output": "r"}]}, "input[0].call_id",
     "invalid_value"),
    ({"model": MODEL, "input": [{"type": "tool_search_output", "call_id": "zz", "execution": "client", "tools": []}]},
     "input[0].call_id", "invalid_value"),
    ({"model": MODEL, "input": [
        {"type": "tool_search_call", "call_id": "s1", "execution": "client", "arguments": {"query": "x"}},
        {"type": "tool_search_output", "call_id": "s1", "execution": "client",
         "tools": [{"type": "namespace", "name": "fs"}]}]}, "input[1].tools[0].tools", "missing_required_parameter"),
    ({"model": MODEL, "input": [
        {"type": "tool_search_call", "call_id": "s1", "execution": "client", "arguments": {"query": "x"}},
        {"type": "tool_search_output", "call_id": "s1", "execution": "client",
         "tools": [{"type": "namespace", "name": "fs", "tools": [{"type": "function"}]}]}]},
     "input[1].tools[0].tools[0].name", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "prompt_cache_retention": "forever"}, "prompt_cache_retention", "invalid_value"),
    ({"model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
     "text.format.name", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema", "json_schema": {  # Chat's nesting
        "name": "x", "schema": {"type": "object"}}}}}, "text.format.name", "missing_required_parameter"),
    ({"model": MODEL, "input": "hi", "text": {"format": {"type": "json_object", "extra": 1}}}, "text.format.extra",
     "unknown_parameter"),
]


@pytest.mark.parametrize("body,param,code", BAD, ids=[b[1] for b in BAD])
async def test_bad_input_names_the_field(serve, body, param, code):
    s = await serve(["never generated"])
    resp = await post(s, "/v1/responses", body)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == param and err["code"] == code, err
    assert err["type"] == "invalid_request_error"


async def test_not_json_and_wrong_model(serve):
    s = await serve(["x"])
    resp = await post(s, "/v1/responses", b"{nope")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    resp = await post(s, "/v1/responses", [1, 2])
    assert resp.status_code == 400
    resp = await post(s, "/v1/responses", {"model": "gpt-9", "input": "hi"})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    assert resp.headers["openai-version"] == "2020-10-01"


async def test_sdk_sees_refusals_as_bad_requests(serve):
    s = await serve(["x"])
    with pytest.raises(openai.BadRequestError) as e:
        await client(s).responses.create(model=MODEL, input="hi", background=True)
    assert e.value.body["param"] == "background"


async def test_prompt_over_the_context_window(serve, demo_tok):
    from tinytitan.engine.backends.scripted import ScriptedBackend

    s = await serve(backend=ScriptedBackend([], demo_tok, model_id=MODEL, context_window=64))
    resp = await post(s, "/v1/responses", {"model": MODEL, "input": "word " * 200})
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == "context_length_exceeded" and err["param"] == "input"
    # the Responses API's own sentence: Codex compacts on the code, pi and opencode match "exceeds the context window"
    assert err["message"].startswith("Your input exceeds the context window of this model. Please adjust your input "
                                     "and try again. (The input is "), err
    assert err["message"].endswith("tokens; the context window is 64.)"), err


async def test_compact_checks_items_with_the_same_schema(serve):
    s = await serve(["never generated"])
    resp = await post(s, "/v1/responses/compact", {"model": MODEL, "input": [{"type": "function_call", "name": "f"}]})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == "input[0].call_id" and err["code"] == "missing_required_parameter", err
