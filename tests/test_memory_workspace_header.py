"""The X-TinyTitan-Workspace header is the client's own statement of its workspace: one that names no usable
workspace (a bare name, a relative path, the home directory) is a 400 in the protocol's own envelope, naming the
header, on every protocol; it never falls back to another workspace's memory (two agents that name theirs
``frontend`` and ``backend`` would otherwise share the launch directory's)."""

from __future__ import annotations

import anthropic
import ollama
import openai
import pytest

from memory_helpers import LAUNCH, PROTOCOLS, SET_CALL, SYSTEM, config, converse, memory_server, on_disk

HEADER = "x-tinytitan-workspace"


def refusal(exc: BaseException) -> tuple[int, str, str | None]:
    """The status, the message and the field named, as each SDK hands the error to its caller."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        return exc.status_code, body.get("message", ""), body.get("param")
    if isinstance(exc, anthropic.APIStatusError):
        error = exc.body["error"]
        assert exc.body["type"] == "error" and error["type"] == "invalid_request_error"
        return exc.status_code, error["message"], HEADER if HEADER in error["message"].lower() else None
    assert isinstance(exc, ollama.ResponseError)
    return exc.status_code, exc.error, HEADER if HEADER in exc.error.lower() else None


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("bad", ["frontend", "src/frontend", "/home/tester", "/"])
async def test_an_unusable_workspace_header_is_the_clients_400(protocol, stream, bad, tmp_path, demo_tok):
    cfg = config(tmp_path)
    async with memory_server(demo_tok, [SET_CALL, "Saved."], cfg) as s:
        with pytest.raises((openai.APIStatusError, anthropic.APIStatusError, ollama.ResponseError)) as err:
            await converse(s, protocol, stream, headers={"X-TinyTitan-Workspace": bad})
    status, message, param = refusal(err.value)
    assert status == 400 and param == HEADER, (status, message, param)
    assert "X-TinyTitan-Workspace" in message
    # nothing was written anywhere: not to the launch directory's memory, nor the system message's
    assert on_disk(cfg.directory, LAUNCH).list() == [] and on_disk(cfg.directory).list() == []


async def test_a_usable_header_still_names_the_workspace(tmp_path, demo_tok):
    cfg = config(tmp_path)
    async with memory_server(demo_tok, [SET_CALL, "Saved."], cfg) as s:
        out = await converse(s, "chat", False, headers={"X-TinyTitan-Workspace": "/src/frontend/"})
    assert out["text"] == "Saved."
    assert [r.key for r in on_disk(cfg.directory, "/src/frontend").list()] == ["build/command"]


async def test_count_tokens_refuses_it_too(tmp_path, demo_tok):
    """Messages' count_tokens counts the prompt memory sends: the same header is refused the same way."""
    async with memory_server(demo_tok, ["ok"], config(tmp_path)) as s:
        async with anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0,
                                            default_headers={"X-TinyTitan-Workspace": "frontend"}) as c:
            with pytest.raises(anthropic.BadRequestError) as err:
                await c.messages.count_tokens(model="tinytitan-scripted", system=SYSTEM,
                                              messages=[{"role": "user", "content": "hi"}])
    status, message, param = refusal(err.value)
    assert status == 400 and param == HEADER and "absolute path" in message


async def test_a_stored_response_belongs_to_the_server_not_to_a_workspace(tmp_path, demo_tok):
    """The workspace scopes memory only (docs/memory.md): a stored response is read and continued by its id
    under any workspace, as the server's key allows, and the continuation's memory is the workspace its own
    request names, not the one the first turn named."""
    cfg = config(tmp_path)
    a, b = {HEADER: "/src/a"}, {HEADER: "/src/b"}
    async with memory_server(demo_tok, ["First.", SET_CALL, "Saved."], cfg) as s:
        async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
            first = await c.responses.create(model="tinytitan-scripted", input="hi", extra_headers=a)
            assert (await c.responses.retrieve(first.id, extra_headers=b)).output_text == "First."
            second = await c.responses.create(model="tinytitan-scripted", input="How do I build this?",
                                              previous_response_id=first.id, extra_headers=b)
    assert second.output_text == "Saved."
    assert [r.key for r in on_disk(cfg.directory, "/src/b").list()] == ["build/command"]
    assert on_disk(cfg.directory, "/src/a").list() == []
