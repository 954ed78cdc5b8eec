"""Every refusal and error of the Messages API: the Anthropic envelope, the right status, the field named,
a request-id header — and never a 500 for bad input."""

from __future__ import annotations

import itertools

import anthropic
import httpx
import pytest
import trio

from anthropic_util import HEADERS, MODEL, assert_envelope, body, post, sdk, sse
from tinytitan.engine.backends.base import Backend
from tinytitan.errors import ApiError

USER = {"role": "user", "content": "hi"}

# (request body changes, the words the message must contain)
REFUSALS = [
    ({"max_tokens": None}, ["max_tokens"]),
    ({"messages": None}, ["messages"]),
    ({"messages": []}, ["messages"]),
    ({"model": None}, ["model"]),
    ({"frequency_penalty": 0.5}, ["frequency_penalty"]),
    ({"max_tokens": 0}, ["max_tokens"]),
    ({"max_tokens": "many"}, ["max_tokens"]),
    ({"temperature": 1.5}, ["temperature"]),
    ({"temperature": -0.1}, ["temperature"]),
    ({"top_p": 2}, ["top_p"]),
    ({"top_k": -1}, ["top_k"]),
    ({"stream": "yes"}, ["stream"]),
    ({"system": 5}, ["system"]),
    ({"system": [{"type": "image", "source": {}}]}, ["image", "system[0]"]),
    ({"system": [{"type": "text"}]}, ["system.0.text: Field required"]),
    ({"messages": [{"role": "robot", "content": "x"}]}, ["messages.0.role: Input should be 'user', 'assistant'"]),
    ({"messages": ["hi"]}, ["messages.0"]),
    ({"messages": [{"role": "user"}]}, ["messages.0.content: Field required"]),
    ({"messages": [{"role": "user", "content": 7}]}, ["messages.0.content"]),
    ({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}, ["messages.0.content.0: Unable to extract tag using discriminator 'type'"]),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]},
     ["messages.0.content.0.image.source.base64.media_type: Field required"]),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]},
     ["Could not process PDF", "messages.0.content.0.document.source.type: "]),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     ["messages.0.content.0.document.source: Unable to extract tag using discriminator 'type'"]),
    ({"messages": [{"role": "user", "content": [{"type": "web_search_tool_result"}]}]}, ["web_search_tool_result"]),
    ({"messages": [{"role": "user", "content": [{"type": "search_result"}]}]},
     ["messages.0.content.0.search_result.source: Field required"]),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                  "content": [{"type": "image", "source": {}}]}]}]},
     ["messages.0.content.0.tool_result.content.0.image.source: Unable to extract tag using "
      "discriminator 'type'"]),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     ["messages.0.content.0.tool_result.tool_use_id: Field required"]),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]}]},
     ["tool_use", "messages[0].content[0]", "user"]),
    ({"messages": [USER, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}, USER]},
     ["tool_result", "is not allowed in an assistant message"]),
    ({"messages": [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n",
                                                             "input": "x"}]}, USER]},
     ["messages.1.content.0.tool_use.input"]),
    # a prefill: the API's own rules for its text, and refused beside what would open the answer itself
    ({"messages": [USER, {"role": "assistant", "content": "The answer is "}]},
     ["final assistant content cannot end with trailing whitespace"]),
    ({"messages": [USER, {"role": "assistant", "content": "It is"}], "max_tokens": 4096,
      "thinking": {"type": "enabled", "budget_tokens": 1024}}, ["prefill", "messages[1].content", "thinking enabled"]),
    ({"messages": [USER, {"role": "assistant", "content": "It is"}], "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "any"}}, ["prefill", "tool_choice 'any'"]),
    ({"messages": [USER, {"role": "assistant", "content": "{"}],
      "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
     ["prefill", "output format"]),
    ({"messages": [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f",
                                                            "input": {}}]}], "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
     ["messages[1].content[0]", "`tool_use` ids were found without `tool_result` blocks", "toolu_1"]),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, ["messages.0.content.0.text.text"]),
    ({"messages": [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]},
     ["messages.2.content.0.tool_result.is_error: Input should be a valid boolean"]),
    ({"service_tier": "bogus"}, ["service_tier"]),
    ({"cache_control": {"type": "ephemeral", "ttl": "2h"}}, ["cache_control.ttl"]),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, ["bash_20250124", "built-in", "tools[0]"]),
    ({"tools": [{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]}, ["text_editor_20250728"]),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, ["web_search_20250305"]),
    ({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}, ["code_execution_20250825"]),
    ({"tools": [{"type": "computer_20250124", "name": "computer"}]}, ["computer_20250124"]),
    ({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, ["web_fetch_20250910"]),
    ({"tools": [{"type": "memory_20250818", "name": "memory"}]}, ["memory_20250818"]),
    ({"tools": [{"type": "holodeck", "name": "h"}]}, ["holodeck", "custom"]),
    ({"tools": [{"name": "f"}]}, ["tools.0.custom.input_schema: Field required"]),
    ({"tools": [{"input_schema": {"type": "object"}}]}, ["tools.0.custom.name: Field required"]),
    ({"tools": [{"name": "f", "input_schema": []}]}, ["tools.0.custom.input_schema"]),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}, {"name": "f", "input_schema": {"type": "object"}}]},
     ["unique", "tools[1]"]),
    # as the API checks a tool: its name's characters, its input schema an object's, and the request's metadata
    ({"tools": [{"name": "a b/c", "input_schema": {"type": "object"}}]}, ["tools.0.custom.name: String should match"]),
    ({"tools": [{"name": "Bash\n", "input_schema": {"type": "object"}}]}, ["tools.0.custom.name: String should"]),  # $ ends the name
    ({"tools": [{"name": "f", "input_schema": {"type": "string"}}]},
     ["tools.0.custom.input_schema.type: Input should be 'object'"]),
    ({"tools": [{"name": "f", "input_schema": {}}]}, ["tools.0.custom.input_schema.type: Field required"]),
    ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}},
     ["tool_choice.auto.disable_parallel_tool_use: Input should be a valid boolean"]),
    ({"metadata": {"user_id": 5}}, ["metadata.user_id"]),
    # a bound in pydantic's words, as the API says it (not OpenAI's validator's)
    ({"metadata": {"user_id": "u" * 257}}, ["metadata.user_id: String should have at most 256 characters"]),
    ({"metadata": {"session": "x"}}, ["metadata.session"]),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_zz", "content": "r"}]}]},
     ["messages[0].content[0]", "unexpected `tool_use_id`", "toolu_zz"]),
    ({"tools": "Bash"}, ["tools"]),
    ({"tool_choice": {"type": "tool"}}, ["tool_choice.name"]),
    ({"tool_choice": {"type": "sometimes"}}, ["tool_choice.type"]),
    ({"tool_choice": "auto"}, ["tool_choice"]),
    ({"stop_sequences": [1]}, ["stop_sequences.0"]),
    ({"stop_sequences": [" "]}, ["stop_sequences[0]"]),
    ({"stop_sequences": "END"}, ["stop_sequences"]),
    ({"thinking": {"type": "enabled", "budget_tokens": 512}}, ["thinking.budget_tokens", "1024"]),
    ({"thinking": {"type": "enabled", "budget_tokens": 4096}, "max_tokens": 4096}, ["max_tokens", "budget_tokens"]),
    ({"thinking": {"type": "enabled"}}, ["thinking.budget_tokens"]),
    ({"thinking": {"type": "enabled", "budget_tokens": "lots"}}, ["thinking.budget_tokens"]),
    ({"thinking": {"type": "sometimes"}}, ["thinking.type"]),
    ({"thinking": {}}, ["thinking: Unable to extract tag using discriminator"]),
    ({"output_config": {"effort": "ludicrous"}}, ["output_config.effort"]),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"not": {}}}}},
     ["output_config.format.schema.not", "'not'"]),
    ({"output_config": {"format": {"type": "json_object"}}}, ["output_config.format.type"]),
    ({"output_format": {"type": "json_schema", "schema": {"if": {}}}}, ["output_format.schema.if"]),
    ({"container": "cntr_1"}, ["container"]),
    ({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]}, ["mcp_servers"]),
    ({"compaction": {"enabled": True}}, ["compaction"]),
    ({"metadata": "user"}, ["metadata"]),
]


@pytest.mark.parametrize("change,needles", REFUSALS, ids=[str(i) for i in range(len(REFUSALS))])
def test_refusals_name_the_field(change, needles, demo_tok):
    """Checked in-process (fast); the HTTP round trip of the same errors is checked below."""
    proto = _proto()
    payload = {k: v for k, v in {**body(), **change}.items() if v is not None}
    with pytest.raises(ApiError) as exc:
        proto.chat_request(proto.validator.validate(payload))
    status, envelope = proto.error_response(exc.value)
    assert status == 400 and envelope["type"] == "error"
    assert envelope["error"]["type"] == "invalid_request_error"
    for n in needles:
        assert n in envelope["error"]["message"], (n, envelope["error"]["message"])


# a malformed request in the API's (pydantic's) exact words, at its spelling of the place: Claude Code reads the
# block's place (messages.0.content.1) to drop that one block; the SDKs and LangChain show the message as it is
TEXT = {"type": "text", "text": "hi"}
TAGS = ("'text', 'image', 'document', 'search_result', 'thinking', 'redacted_thinking', 'tool_use', 'tool_result', "
        "'server_tool_use', 'web_search_tool_result', 'web_fetch_tool_result', 'code_execution_tool_result', "
        "'bash_code_execution_tool_result', 'text_editor_code_execution_tool_result', 'tool_search_tool_result', "
        "'container_upload'")
WORDED = [
    ({"messages": [{"role": "user", "content": [TEXT, {"type": "search_result", "source": "s", "title": "t",
                                                       "content": "x"}]}]},
     "messages.0.content.1.search_result.content: Input should be a valid list"),
    ({"messages": [{"role": "user", "content": [TEXT, {"type": "text", "text": 3}]}]},
     "messages.0.content.1.text.text: Input should be a valid string"),
    ({"messages": [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n",
                                                             "input": "x"}]}, USER]},
     "messages.1.content.0.tool_use.input: Input should be a valid dictionary"),
    ({"messages": [{"role": "user", "content": 7}]}, "messages.0.content.str: Input should be a valid string"),
    ({"messages": ["hi"]}, "messages.0: Input should be a valid dictionary"),
    ({"messages": [{"role": "user", "content": [TEXT, {"text": "no type"}]}]},
     "messages.0.content.1: Unable to extract tag using discriminator 'type'"),
    ({"messages": [{"role": "user", "content": [TEXT, {"type": "holodeck"}]}]},
     f"messages.0.content.1: Input tag 'holodeck' found using 'type' does not match any of the expected tags: {TAGS}"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                  "content": [TEXT, {"type": "holo"}]}]}]},
     "messages.0.content.0.tool_result.content.1: Input tag 'holo' found using 'type' does not match any of the "
     "expected tags: 'text', 'image', 'search_result', 'document', 'tool_reference', 'browser_state'"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages.0.content.0.image.source: Unable to extract tag using discriminator 'type'"),
    ({"thinking": {}}, "thinking: Unable to extract tag using discriminator 'type'"),
    ({"tools": [{"type": "holodeck", "name": "h"}]},
     "tools.0: Input tag 'holodeck' found using 'type' does not match any of the expected tags: 'custom', "
     "'bash_20250124', 'code_execution_20250522', 'code_execution_20250825', 'code_execution_20260120', "
     "'code_execution_20260521', 'browser_toolset_20260801', 'memory_20250818', 'computer_toolset_20260801', "
     "'text_editor_20250124', 'text_editor_20250429', 'text_editor_20250728', 'web_search_20250305', "
     "'web_fetch_20250910', 'web_search_20260209', 'web_fetch_20260209', 'web_fetch_20260309', 'web_search_20260318', "
     "'web_fetch_20260318', 'tool_search_tool_bm25_20251119', 'tool_search_tool_bm25', "
     "'tool_search_tool_regex_20251119', 'tool_search_tool_regex'"),
    # a type the API knows and this server does not serve stays refused by name
    ({"messages": [{"role": "user", "content": [{"type": "web_search_tool_result"}]}]},
     "content block type 'web_search_tool_result' at messages[0].content[0].type is not supported: this server takes "
     "text, image, document, search_result, tool_use and tool_result blocks only"),
    ({"tools": [{"name": "", "input_schema": {"type": "object"}}]},
     "tools.0.custom.name: String should have at least 1 character"),
    ({"tools": [{"name": "f" * 129, "input_schema": {"type": "object"}}]},
     "tools.0.custom.name: String should have at most 128 characters"),
    ({"tools": [{"name": "a.b", "input_schema": {"type": "object"}}]},
     "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"),
    ({"tools": [{"name": "f", "input_schema": []}]}, "tools.0.custom.input_schema: Input should be a valid dictionary"),
    ({"tools": "Bash"}, "tools: Input should be a valid list"),
    ({"max_tokens": "many"}, "max_tokens: Input should be a valid integer"),
    ({"stream": "yes"}, "stream: Input should be a valid boolean"),
    ({"stop_sequences": [1]}, "stop_sequences.0: Input should be a valid string"),
    ({"stop_sequences": ["s"] * 257}, "stop_sequences: List should have at most 256 items after validation, not 257"),
    ({"metadata": {"user_id": 5}}, "metadata.user_id: Input should be a valid string"),
]


@pytest.mark.parametrize("change,words", WORDED, ids=[str(i) for i in range(len(WORDED))])
def test_a_malformed_request_is_worded_as_the_api_words_it(change, words):
    proto = _proto()
    with pytest.raises(ApiError) as exc:
        proto.chat_request(proto.validator.validate({**body(), **change}))
    assert proto.error_response(exc.value)[1]["error"]["message"] == words


async def test_the_api_wording_over_http_and_through_the_sdk(serve):
    s = await serve(["never"])
    for change, words in WORDED[::3]:
        d = assert_envelope(await post(s, {**body(), **change}, "/v1/messages?beta=true"), 400, "invalid_request_error")
        assert d["error"]["message"] == words
    untyped = [{"role": "user", "content": [{"text": "x"}]}]
    with pytest.raises(anthropic.BadRequestError) as exc:
        await sdk(s).messages.create(model=MODEL, max_tokens=10, messages=untyped)
    assert exc.value.body["error"]["message"] == "messages.0.content.0: Unable to extract tag using discriminator 'type'"


_PROTO = []


def _proto():
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    if not _PROTO:
        _PROTO.append(AnthropicMessages())
    return _PROTO[0]


async def test_refusals_over_http_and_through_the_sdk(serve):
    s = await serve(["ok"])
    for change, needles in REFUSALS[::7]:
        payload = {k: v for k, v in {**body(), **change}.items() if v is not None}
        assert_envelope(await post(s, payload, "/v1/messages?beta=true"), 400, "invalid_request_error", *needles)
    with pytest.raises(anthropic.BadRequestError) as exc:
        await sdk(s).messages.create(model=MODEL, max_tokens=100, messages=[USER],
                                     tool_choice={"type": "tool", "name": "g"}, tools=[{"name": "f", "input_schema": {}}])
    assert exc.value.status_code == 400 and exc.value.body["error"]["type"] == "invalid_request_error"
    assert exc.value.response.headers["request-id"].startswith("req_")
    assert exc.value.body["request_id"] == exc.value.response.headers["request-id"]  # as the API's bodies carry it


async def test_failures_before_the_handler_use_the_anthropic_envelope(serve):
    s = await serve(["ok"], api_key="sekrit", allowed_hosts=())
    good = {**HEADERS, "x-api-key": "sekrit"}
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/messages"), content=b"{not json", headers=good)
        assert_envelope(r, 400, "invalid_request_error", "JSON")
        r = await c.post(s.url("/v1/messages"), content=b"[" * 100_000, headers=good)
        assert_envelope(r, 400, "invalid_request_error", "nested")
        r = await c.post(s.url("/v1/messages"), content=b"\xff\xfe", headers=good)
        assert_envelope(r, 400, "invalid_request_error", "JSON")
        r = await c.post(s.url("/v1/messages"), content=b"[1, 2]", headers=good)
        assert_envelope(r, 400, "invalid_request_error", "object")
        r = await c.post(s.url("/v1/messages"), json=body(), headers={**HEADERS, "x-api-key": "wrong"})
        assert_envelope(r, 401, "authentication_error", "API key")
        r = await c.post(s.url("/v1/messages"), json=body(), headers={"content-type": "application/json"})
        assert_envelope(r, 401, "authentication_error")  # no anthropic-version: the path still decides
        r = await c.post(s.url("/v1/messages"), json=body(), headers={**good, "host": "evil.example"})
        assert_envelope(r, 403, "permission_error", "evil.example")
        r = await c.get(s.url("/v1/messages"), headers=good)
        assert_envelope(r, 405, "invalid_request_error", "GET")
        r = await c.post(s.url("/v1/messages/batches"), json={}, headers={"x-api-key": "sekrit"})
        assert_envelope(r, 404, "not_found_error", "/v1/messages/batches")
        r = await c.post(s.url("/v1/messages/count_tokens"), content=b"{", headers=good)
        assert_envelope(r, 400, "invalid_request_error", "JSON")
        r = await c.post(s.url("/v1/unknown"), json={}, headers=good)  # anthropic-version picks the envelope
        assert_envelope(r, 404, "not_found_error")
        r = await c.post(s.url("/v1/messages"), json=body(), headers=good)
        assert r.status_code == 200 and r.headers["request-id"].startswith("req_")
        root = await c.head(s.url("/"))
        assert root.status_code == 200
        # the OpenAI side keeps its own envelope
        r = await c.post(s.url("/v1/chat/completions"), content=b"{", headers={"authorization": "Bearer sekrit"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error" and "type" not in r.json()
    with pytest.raises(anthropic.AuthenticationError):
        await sdk(s).messages.create(model=MODEL, max_tokens=10, messages=[USER])


async def test_unknown_model_is_not_found(serve):
    s = await serve(["ok"])
    assert_envelope(await post(s, body(model="claude-opus-4-1")), 404, "not_found_error", "claude-opus-4-1")
    with pytest.raises(anthropic.NotFoundError):
        await sdk(s).messages.count_tokens(model="claude-opus-4-1", messages=[USER])


async def test_a_full_queue_is_529_overloaded(serve):
    s = await serve([{"output": "slow " * 200, "delay_ms": 50}, "fast"], max_queue=0)
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream("POST", s.url("/v1/messages"), json=body(stream=True), headers=HEADERS) as held:
            lines = held.aiter_lines()  # kept referenced: a collected iterator would close the stream
            async for line in lines:
                if line.startswith("event: content_block_delta"):
                    break  # the slot is taken now
            r = await post(s, body())
            assert_envelope(r, 529, "overloaded_error", "busy")
            assert r.headers["retry-after"] == "1"
            with pytest.raises(anthropic.OverloadedError):
                await sdk(s).messages.create(model=MODEL, max_tokens=10, messages=[USER])
    with trio.fail_after(5):  # the client hung up (the answer would take 10 s more): its generation is cancelled and the slot freed
        while s.engine.running or s.engine.waiting:
            await trio.sleep(0.01)
    m = await sdk(s).messages.create(model=MODEL, max_tokens=10, messages=[USER])
    assert m.content[0].text == "fast"


async def test_a_failed_generation(serve):
    s = await serve([{"output": "partial answer", "error": "boom"}, {"output": "x", "error": "kaput"}])
    r = await post(s, body(stream=True))
    events = sse(r.text)
    assert events[0][0] == "message_start"
    assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error",
                                                               "message": "generation failed: boom"}})
    assert "message_stop" not in [e for e, _ in events]
    assert_envelope(await post(s, body()), 500, "api_error", "kaput")


class NoTokenizer(Backend):
    model_id = MODEL
    tokenizer = None

    def decode(self, prepared, loop, should_stop):
        raise AssertionError("not reached")


async def test_count_tokens_without_a_tokenizer_is_501(serve):
    s = await serve(backend=NoTokenizer())
    r = await post(s, {"model": MODEL, "messages": [USER]}, "/v1/messages/count_tokens?beta=true")
    assert_envelope(r, 501, "api_error", "tokenizer")


FUZZ_VALUES = [None, 0, -1, 1.5, "x", "", True, [], {}, [1], ["x"], [{}], [{"type": "text"}], {"type": None},
               {"type": "enabled", "budget_tokens": 2000}]


def test_no_bad_input_is_a_500(demo_tok):
    """Every declared field, and the shapes inside messages, with values of every JSON type: an ApiError
    (a 4xx) or a ChatRequest the backend renders — never another exception."""
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    proto = _proto()
    backend = ScriptedBackend([ScriptEntry("x")], demo_tok, model_id=MODEL)
    fields = list(proto.spec.request["fields"])
    cases = [{name: value} for name, value in itertools.product(fields, FUZZ_VALUES)]
    inner = [{"role": "user", "content": [{"type": t, **{k: value}}]}
             for t in ("text", "tool_result", "tool_use", "thinking")
             for k in ("text", "content", "input", "id", "name", "tool_use_id", "is_error")
             for value in FUZZ_VALUES]
    cases += [{"messages": [m]} for m in inner]
    cases += [{"messages": [USER, {"role": "assistant", "content": m["content"]}, USER]} for m in inner]
    cases += [{"tools": [{"name": "f", "input_schema": {"type": "object"}, k: v}]}
              for k in ("description", "cache_control", "strict", "type") for v in FUZZ_VALUES]
    cases += [{"system": [{"type": "text", "text": v}]} for v in FUZZ_VALUES]
    cases += [{"tool_choice": {"type": v}} for v in FUZZ_VALUES]
    cases += [{"output_config": {"effort": v}} for v in FUZZ_VALUES]
    cases += [{"template_vars": {"enable_thinking": v}} for v in FUZZ_VALUES]
    seen_ok = 0
    for change in cases:
        payload = {**body(), **change}
        try:
            req = proto.chat_request(proto.validator.validate(payload))
            backend.prepare(req)
            seen_ok += 1
        except ApiError as exc:
            status, _ = proto.error_response(exc)
            assert 400 <= status < 500, (change, exc.message)
    assert seen_ok > 50


async def test_a_tool_choice_name_not_a_string_is_worded_as_a_wrong_type(serve):
    """``tool_choice.name`` there but not a string is refused in the API's words for a wrong type, not as missing."""
    s = await serve(["never"])
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = await post(s, body(tools=tools, tool_choice={"type": "tool", "name": 5}), path)
        d = assert_envelope(r, 400, "invalid_request_error")
        assert d["error"]["message"] == "tool_choice.tool.name: Input should be a valid string", d


async def test_a_block_cache_control_is_checked_as_the_top_level_one_is(serve):
    """A cache breakpoint on a block (system, message, tool result and its content, tool) with a ttl or type the API
    does not take is refused at its place, as the top-level one is; 5m, 1h and no ttl stay accepted everywhere."""
    s = await serve(["Hello."])
    tool = {"name": "f", "input_schema": {"type": "object"}}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}

    def bodies(cc):
        result = {"type": "tool_result", "tool_use_id": "toolu_1"}
        return {
            "system.0": body(system=[{"type": "text", "text": "s", "cache_control": cc}]),
            "messages.0.content.0.text": body(messages=[{"role": "user", "content": [
                {"type": "text", "text": "x", "cache_control": cc}]}]),
            "messages.2.content.0.tool_result": body(tools=[tool], messages=[USER, call, {"role": "user", "content": [
                {**result, "content": "r", "cache_control": cc}]}]),
            "messages.2.content.0.tool_result.content.0.text": body(tools=[tool], messages=[USER, call, {
                "role": "user", "content": [{**result, "content": [{"type": "text", "text": "r", "cache_control": cc}]}]}]),
            "tools.0.custom": body(tools=[{**tool, "cache_control": cc}]),
        }

    for cc in ({"type": "ephemeral"}, {"type": "ephemeral", "ttl": "5m"}, {"type": "ephemeral", "ttl": "1h"}, None):
        for payload in bodies(cc).values():
            r = await post(s, payload)
            assert r.status_code == 200, (cc, r.text)
    for cc, words in (({"type": "ephemeral", "ttl": "2h"}, "cache_control.ttl: Input should be '5m' or '1h'"),
                      ({"type": "persistent"}, "cache_control.type: Input should be 'ephemeral'")):
        for place, payload in bodies(cc).items():
            d = assert_envelope(await post(s, payload), 400, "invalid_request_error")
            assert d["error"]["message"] == f"{place}.{words}", d


async def test_thinking_enabled_beside_a_forced_tool_choice_is_refused_as_the_api_refuses_it(serve):
    """The API refuses thinking enabled with tool_choice any or tool (a forced call begins the answer, where no
    thought can come first); it was served with thinking quietly off. Thinking off or adaptive beside a forced
    call, and thinking enabled beside auto, stay served."""
    call = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    s = await serve([call] * 4)
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    for choice in ({"type": "any"}, {"type": "tool", "name": "f"}):
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            r = await post(s, body(max_tokens=2048, tools=tools, thinking=thinking, tool_choice=choice), path)
            d = assert_envelope(r, 400, "invalid_request_error")
            assert d["error"]["message"] == "Thinking may not be enabled when tool_choice forces tool use.", d
    with pytest.raises(anthropic.BadRequestError):
        await sdk(s).messages.create(model=MODEL, max_tokens=2048, tools=tools, thinking=thinking,
                                     tool_choice={"type": "any"}, messages=[USER])
    for change in ({"thinking": {"type": "disabled"}, "tool_choice": {"type": "any"}},
                   {"thinking": {"type": "adaptive"}, "tool_choice": {"type": "tool", "name": "f"}},
                   {"thinking": thinking, "tool_choice": {"type": "auto"}}):
        r = await post(s, body(max_tokens=2048, tools=tools, **change))
        assert r.status_code == 200 and r.json()["content"][-1]["type"] == "tool_use", (change, r.text)
