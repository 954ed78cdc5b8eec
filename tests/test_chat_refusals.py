"""Every refusal and bad input of Chat Completions: a 4xx in the OpenAI envelope naming the field."""

from __future__ import annotations

import re

import httpx
import pytest

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


async def call(s, body=None, *, content=None, headers=None, path="/v1/chat/completions", method="POST"):
    async with httpx.AsyncClient(timeout=30) as c:
        if content is not None:
            return await c.request(method, s.url(path), content=content, headers=headers)
        return await c.request(method, s.url(path), json=body, headers=headers)


def envelope(r, status, param=None, code=None, contains=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] and err["message"]
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    if contains is not None:
        assert contains in err["message"], err["message"]
    assert r.headers["openai-version"] == "2020-10-01"
    return err


@pytest.mark.parametrize("extra, param, contains", [
    ({"n": 129}, "n", "128"),  # OpenAI's bound on choices
    ({"top_logprobs": 2}, "top_logprobs", "only allowed when 'logprobs' is enabled"),
    ({"stop": ["s"] * 257}, "stop", "Expected an array with maximum length 256, but got an array with length 257"),
    ({"tool_choice": "sometimes"}, "tool_choice", "sometimes"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools[0].function.strict",
     "strict"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "zz", "content": "r"}]},
     "messages[1].tool_call_id", "must be a response to a preceding message with 'tool_calls'"),
    # a tool's name as the API holds it, with MCP's dot (^[a-zA-Z0-9_.-]+$, at most 64): in OpenAI's
    # words, naming the place
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name",
     "string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_.-]+$'."),
    ({"tools": [{"type": "function", "function": {"name": "fs:read"}}]}, "tools[0].function.name", "pattern"),
    ({"tools": [{"type": "function", "function": {"name": "Bash\n"}}]}, "tools[0].function.name", "pattern"),
    ({"tools": [{"type": "function", "function": {"name": "f" * 65}}]}, "tools[0].function.name",
     "Expected a string with maximum length 64, but got a string with length 65 instead."),
    ({"tools": [{"type": "custom", "custom": {"name": "apply patch"}}]}, "tools[0].custom.name", "pattern"),
    ({"tool_choice": {"type": "function", "function": {}}}, "tool_choice.name", "tool_choice.name"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice", "'f'"),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"tools": [{"type": "custom", "custom": {"name": "x", "format": {"type": "grammar", "grammar": {"syntax": "ebnf", "definition": "x"}}}}]}, "tools[0].custom.format.syntax", "ebnf"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "web_search"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                                 "schema": {"uniqueItems": True}}}},
     "response_format.json_schema.schema.uniqueItems", "uniqueItems"),  # strict: what the grammar cannot promise
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "schema": {"type": "object"}}}, "response_format.json_schema",
     "response_format.json_schema"),  # the flat spelling is Responses', not Chat's
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b!", "schema": {}}}},
     "response_format.json_schema.name", "name"),
    ({"response_format": {"type": "json_object", "schema": {"type": "objekt"}}},
     "response_format.schema.type", "objekt"),  # llama.cpp's spelling: its schema is checked and enforced
    ({"modalities": ["text", "audio"]}, "modalities", "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "audio"),
    ({"functions": [{"name": "f"}]}, "functions", "functions"),
    ({"temperature": "hot"}, "temperature", "number"),
    ({"temperature": 3}, "temperature", "maximum"),
    ({"max_tokens": 0}, "max_tokens", "minimum"),
    ({"stream": "yes"}, "stream", "boolean"),
    ({"frobnicate": 1}, "frobnicate", "frobnicate"),
])
async def test_refused_by_name(serve, extra, param, contains):
    s = await serve(["ok"])
    r = await call(s, {"model": MODEL, "messages": USER, **extra})
    envelope(r, 400, param=param, contains=contains)


async def test_agents_tool_names_are_taken(serve):
    """The names agents give their tools fit the API's rule, and are answered: Claude Code's and Codex's MCP
    names, opencode's server_tool, a hyphen, 64 characters, and MCP's dotted ones (SEP-986), which qwen-code
    and openai-agents pass through."""
    s = await serve(["ok"])
    names = ["mcp__github__create_issue", "Bash", "todo-write", "context7_resolve-library-id", "x" * 64,
             "admin.tools.list", "github.create-issue"]
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]
    r = await call(s, {"model": MODEL, "messages": USER, "tools": tools})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "file", "file": {"file_id": "f"}},
])
async def test_non_text_parts_refused_naming_the_part(serve, part):
    s = await serve(["ok"])
    messages = [{"role": "user", "content": [{"type": "text", "text": "look"}, part]}]
    r = await call(s, {"model": MODEL, "messages": messages})
    # an image reaches the model check (a text model here): refused naming the part, as OpenAI says it
    image = part["type"] == "image_url"
    err = envelope(r, 400, param="messages[0].content[1]" + ("" if image else ".type"))
    assert part["type"] in err["message"]
    assert ("only supported by certain models" in err["message"]) == image


@pytest.mark.parametrize("body, param", [
    ({"model": MODEL}, "messages"),
    ({"messages": USER}, "model"),
    ({"model": MODEL, "messages": "hi"}, "messages"),
    ({"model": MODEL, "messages": []}, "messages"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"model": MODEL, "messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"model": MODEL, "messages": USER, "stop": [1]}, "stop[0]"),
])
async def test_malformed_requests(serve, body, param):
    s = await serve(["ok"])
    envelope(await call(s, body), 400, param=param)


async def test_malformed_json_and_non_object(serve):
    s = await serve(["ok"])
    envelope(await call(s, content=b'{"model": ', headers={"content-type": "application/json"}), 400,
             code="invalid_json")
    envelope(await call(s, content=b"[1, 2]", headers={"content-type": "application/json"}), 400,
             code="invalid_body")
    envelope(await call(s, content=b"\xff\xfe", headers={"content-type": "application/json"}), 400,
             code="invalid_json")


async def test_unknown_model_is_404(serve):
    s = await serve(["ok"])
    envelope(await call(s, {"model": "gpt-9", "messages": USER}), 404, param="model", code="model_not_found")


async def test_unknown_route_and_method(serve):
    s = await serve(["ok"])
    envelope(await call(s, {}, path="/v1/nothing"), 404, code="not_found")
    envelope(await call(s, None, path="/v1/chat/completions", method="GET"), 405)


async def test_prompt_over_context_window(serve, demo_tok):
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    s = await serve(backend=ScriptedBackend([ScriptEntry("ok")], demo_tok, context_window=32))
    r = await call(s, {"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "word " * 100}]})
    envelope(r, 400, code="context_length_exceeded")
    # OpenAI's wording, which pi and litellm match to start compacting
    assert re.fullmatch(r"This model's maximum context length is 32 tokens\. However, your messages resulted in "
                        r"\d+ tokens\. Please reduce the length of the messages\.", r.json()["error"]["message"])


async def test_host_allow_list(serve):
    s = await serve(["ok"], allowed_hosts=("tinytitan.local",))
    envelope(await call(s, {"model": MODEL, "messages": USER}, headers={"host": "evil.example"}), 403,
             contains="evil.example")
    r = await call(s, {"model": MODEL, "messages": USER}, headers={"host": "tinytitan.local:8096"})
    assert r.status_code == 200
    r = await call(s, {"model": MODEL, "messages": USER}, headers={"host": "localhost:1234"})
    assert r.status_code == 200


async def test_api_key(serve):
    s = await serve(["ok"], api_key="sekrit")
    body = {"model": MODEL, "messages": USER}
    envelope(await call(s, body), 401)
    envelope(await call(s, body, headers={"authorization": "Bearer wrong"}), 401)
    assert (await call(s, body, headers={"authorization": "Bearer sekrit"})).status_code == 200
    assert (await call(s, body, headers={"x-api-key": "sekrit"})).status_code == 200
    async with httpx.AsyncClient() as c:
        assert (await c.get(s.url("/health"))).status_code == 200  # health needs no key


async def test_the_api_key_is_compared_in_constant_time(serve, monkeypatch):
    """Each key offered goes through hmac.compare_digest (a plain == returns at the first byte that differs, so how
    long a refusal takes would say how much of a guess was right); a wrong x-api-key beside the right bearer (or
    the other way round) is still let in, as before."""
    import hmac

    from tinytitan.http import guard

    compared, real = [], hmac.compare_digest

    def compare(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(guard.hmac, "compare_digest", compare)
    s = await serve(["ok"], api_key="sekrit")
    body = {"model": MODEL, "messages": USER}
    envelope(await call(s, body, headers={"authorization": "Bearer sekrat"}), 401)
    assert (b"sekrat", b"sekrit") in compared
    for headers in ({"x-api-key": "wrong", "authorization": "Bearer sekrit"},
                    {"x-api-key": "sekrit", "authorization": "Bearer wrong"}):
        assert (await call(s, body, headers=headers)).status_code == 200


async def test_no_api_key_accepts_any(serve):
    s = await serve(["ok"])
    body = {"model": MODEL, "messages": USER}
    assert (await call(s, body, headers={"authorization": "Bearer whatever"})).status_code == 200
    assert (await call(s, body, headers={"x-api-key": "whatever"})).status_code == 200


async def test_template_refusal_is_a_400(serve, demo_tok):
    """A chat template that raises (e.g. roles out of order) answers 400 naming messages, not 500."""
    import copy

    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    tok = copy.copy(demo_tok)
    backend = ScriptedBackend([ScriptEntry("ok")], tok)
    backend.render = lambda req: (_ for _ in ()).throw(__import__("jinja2").TemplateError("roles must alternate"))
    s = await serve(backend=backend)
    r = await call(s, {"model": MODEL, "messages": USER})
    envelope(r, 400, param="messages", code="template_error", contains="roles must alternate")


async def test_body_too_large_is_413_in_each_envelope(serve):
    s = await serve(["ok"], max_body_bytes=2000)
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]}
    r = await call(s, big)
    envelope(r, 413, code="request_too_large")
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/messages"), json={**big, "max_tokens": 5},
                         headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 413
    assert r.json() == {"type": "error", "error": {"type": "request_too_large", "message": r.json()["error"]["message"]},
                        "request_id": r.headers["request-id"]}


async def test_a_prompt_that_cannot_fit_is_refused_before_it_is_rendered(serve, demo_tok):
    """Megabytes of prompt are refused from a bound (the text over the longest token), without rendering or
    tokenizing them; a prompt that may fit is still measured exactly."""
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    backend = ScriptedBackend([ScriptEntry("ok")], demo_tok, context_window=1000)
    encoded = []
    real = backend.timed_encode
    backend.timed_encode = lambda req, **kw: encoded.append(1) or real(req, **kw)
    s = await serve(backend=backend)
    big = "x" * (1000 * backend.longest_token + 1)
    r = await call(s, {"model": MODEL, "messages": [{"role": "user", "content": big}]})
    envelope(r, 400, code="context_length_exceeded")
    assert r.json()["error"]["message"].startswith("This model's maximum context length is 1000 tokens.")
    assert encoded == []
    r = await call(s, {"model": MODEL, "messages": [{"role": "user", "content": "word " * 100}]})
    assert r.status_code == 200 and encoded == [1]
