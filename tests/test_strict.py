"""The strict checker itself: it must refuse what the SDK clients would silently accept."""

from __future__ import annotations

import copy

import pytest

import strict

RESPONSE = {
    "id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m", "output": [],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
    "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
    "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
              "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 4},
}


def edited(doc, path, value=strict):
    doc = copy.deepcopy(doc)
    node = doc
    for step in path[:-1]:
        node = node[step]
    if value is strict:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def test_a_valid_response_passes():
    assert strict.response(RESPONSE).usage.input_tokens_details.cache_write_tokens == 0
    assert strict.body(RESPONSE).id == "resp_1"


@pytest.mark.parametrize("path,value", [
    (("usage", "input_tokens_details", "cache_write_tokens"), strict),  # a missing required field
    (("usage", "input_tokens"), "3"),                                     # a number as a string
    (("parallel_tool_calls",), 1),                                        # an int for a bool
    (("status",), "done"),                                                # not one of the statuses
    (("usage", "output_tokens_details", "reasoning_tokenz"), 0),          # a field the API does not define
    (("spurious",), None),
])
def test_what_a_lenient_client_accepts_is_refused(path, value):
    with pytest.raises(strict.StrictError):
        strict.response(edited(RESPONSE, path, value))


def test_envelopes_are_told_apart():
    strict.body({"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": None}})
    strict.body({"type": "error", "error": {"type": "invalid_request_error", "message": "m"}})
    with pytest.raises(strict.StrictError):
        strict.openai_error({"error": {"message": "m", "type": "x"}, "extra": 1})
    with pytest.raises(strict.StrictError):
        strict.anthropic_error({"type": "error", "error": {"type": "no_such_type", "message": "m"}})


def test_events_by_protocol():
    strict.event("chat", "[DONE]")
    strict.event("messages", {"type": "ping"})
    with pytest.raises(strict.StrictError):
        strict.event("messages", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}})  # no usage
    with pytest.raises(strict.StrictError):
        strict.event("responses", {"type": "response.output_text.delta", "delta": "x"})
    with pytest.raises(strict.StrictError, match="differs"):
        strict.sse_events("messages", [("content_block_stop", {"type": "ping"})])


OLLAMA_CHAT = {"model": "m:latest", "created_at": "2026-12-01T00:00:00Z", "done": True, "done_reason": "stop",
               "message": {"role": "assistant", "content": "hi",
                           "tool_calls": [{"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {}}}]},
               "total_duration": 1, "load_duration": 0, "prompt_eval_count": 1, "prompt_eval_duration": 1,
               "eval_count": 1, "eval_duration": 1}


@pytest.mark.parametrize("path,value", [
    (("done",), "true"),                                  # a string where Ollama's client wants a bool
    (("message", "content"), 3),
    (("message", "role"), strict),                        # required by the client's model
    (("message", "sprinkles"), 1),                        # a field the client's model does not define ...
    (("eval_counts",), 1),                                # ... at any depth
])
def test_ollama_replies_are_held_to_the_ollama_clients_models(path, value):
    strict.ollama_reply("/api/chat", OLLAMA_CHAT)
    with pytest.raises(strict.StrictError):
        strict.ollama_reply("/api/chat", edited(OLLAMA_CHAT, path, value))


def test_ollama_errors_are_one_field():
    strict.check_ollama_reply("POST", "/api/chat", 400, "application/json", b'{"error": "bad"}')
    with pytest.raises(strict.StrictError):
        strict.check_ollama_reply("POST", "/api/chat", 400, "application/json", b'{"error": "bad", "code": 1}')
