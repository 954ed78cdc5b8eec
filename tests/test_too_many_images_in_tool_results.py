"""The image past the per-request cap (images.MAX_IMAGES, 100) is refused by name on every protocol that takes
images, in its own envelope, wherever it stands: inside an Anthropic tool_result (Claude Code's Read of a PNG), a
Responses function_call_output (Codex's view_image), a Chat tool message, an Ollama tool message. No image is
dropped to fit the cap; nothing reaches the model."""

from __future__ import annotations

import pytest

from anthropic_util import HEADERS
from image_helpers import MODEL, PNG, post_json, b64, data_url, seeing  # noqa: F401  (fixture)
from tinytitan import images

CHAT_IMAGE = {"type": "image_url", "image_url": {"url": data_url(PNG)}}
RESPONSES_IMAGE = {"type": "input_image", "image_url": data_url(PNG)}
MESSAGES_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}}

CASES = [
    ("/v1/chat/completions", {"messages": [
        {"role": "user", "content": [CHAT_IMAGE, CHAT_IMAGE]},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "shot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "here"}, CHAT_IMAGE]}]},
     {}, "messages[2].content[1]"),
    ("/v1/responses", {"input": [
        {"role": "user", "content": [RESPONSES_IMAGE, RESPONSES_IMAGE]},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [RESPONSES_IMAGE]}]},
     {}, "input[2].output[0]"),
    ("/v1/messages", {"max_tokens": 5, "messages": [
        {"role": "user", "content": [MESSAGES_IMAGE, MESSAGES_IMAGE]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "here"}, MESSAGES_IMAGE]}]}]},
     HEADERS, "messages.2.content.0.tool_result.content.1.image"),  # the API's spelling, which Claude Code reads
    ("/api/chat", {"stream": False, "messages": [
        {"role": "user", "content": "see", "images": [b64(PNG), b64(PNG)]},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "shot", "arguments": {}}}]},
        {"role": "tool", "content": "here", "images": [b64(PNG)]}]},
     {}, "messages[2].images[0]"),
]


@pytest.mark.parametrize("path,body,headers,where", CASES, ids=["chat", "responses", "messages", "ollama"])
async def test_the_image_past_the_cap_in_a_tool_result_is_refused_by_name(seeing, monkeypatch, path, body, headers,
                                                                          where):
    s, backend = seeing
    monkeypatch.setattr(images, "MAX_IMAGES", 2)
    r = await post_json(s, path, {"model": MODEL, **body}, headers)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    message = err if isinstance(err, str) else err["message"]
    assert f"{where}: too many images in one request: 3 > 2" in message, message
    if path == "/v1/messages":
        assert message.startswith("Could not process image: ")
    elif path != "/api/chat":
        assert err["code"] == "too_many_images" and err["param"] == where
    assert backend.requests == []
    monkeypatch.setattr(images, "MAX_IMAGES", 3)  # at the cap, the same conversation reaches the model whole
    r = await post_json(s, path, {"model": MODEL, **body}, headers)
    assert r.status_code == 200, r.text
    assert len(backend.requests[-1].images) == 3
