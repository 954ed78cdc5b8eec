"""With --fetch-images, a remote image URL standing in several places of one request (a screenshot sent again
inside a tool result, Claude Code's Read of the same picture; Codex's view_image in a function_call_output) is
fetched once: every place reads the same bytes, each named where it stands."""

from __future__ import annotations

import httpx
import pytest

from anthropic_util import HEADERS
from image_helpers import MODEL, PNG, Seeing, assert_images
from tinytitan.engine.backends.scripted import ScriptEntry
from image_helpers import counting_host  # noqa: F401  (the fixture)


def chat(url: str) -> tuple[str, dict, dict, list[str]]:
    return "/v1/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "shot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": url}]}],
        "tools": [{"type": "function", "function": {"name": "shot", "parameters": {"type": "object"}}}]}, {}, \
        ["messages[0].content[0]", "messages[2].content[0]"]


def responses(url: str) -> tuple[str, dict, dict, list[str]]:
    return "/v1/responses", {"input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": url}]},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": url}]}],
        "tools": [{"type": "function", "name": "view_image", "parameters": {"type": "object"}}]}, {}, \
        ["input[0].content[0]", "input[2].output[0]"]


def messages(url: str) -> tuple[str, dict, dict, list[str]]:
    image = {"type": "image", "source": {"type": "url", "url": url}}
    return "/v1/messages", {"max_tokens": 5, "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
                            "messages": [
        {"role": "user", "content": [image]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image]}]}]}, HEADERS, \
        ["messages[0].content[0]", "messages[2].content[0].content[0]"]


@pytest.mark.parametrize("shape", [chat, responses, messages], ids=["chat", "responses", "messages"])
async def test_a_url_in_several_places_is_fetched_once(serve, demo_tok, counting_host, shape):
    base, hits = counting_host
    backend = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend, fetch_images=True)
    path, body, headers, wheres = shape(base + "/shot.png")
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json={"model": MODEL, **body}, headers=headers)
    assert r.status_code == 200, r.text
    assert hits == {"/shot.png": 1}
    assert_images(backend.requests[-1], [(PNG, "image/png", where) for where in wheres])


async def test_a_traces_remote_images_are_fetched(serve, demo_tok, counting_host):
    """Codex's ``trace_summarize``: a trace's remote images are fetched as ``/compact``'s input's are, and a
    model that reads images sees them in the summary pass."""
    base, hits = counting_host
    backend = Seeing([ScriptEntry("A screenshot was shown."), ScriptEntry("Screenshot.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend, fetch_images=True)
    items = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": base + "/trace.png"}]}]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/memories/trace_summarize"),
                         json={"model": MODEL, "traces": [{"id": "t", "items": items}]})
    assert r.status_code == 200, r.text
    assert hits == {"/trace.png": 1}
    assert [(p.data, p.where) for p in backend.requests[0].images] == [(PNG, "traces[0].items[0].content[1]")]
