"""The API's rules for a conversation's turns (Anthropic Messages), refused in its words and accepted where it
accepts: a user turn with content, thinking only in assistant turns (a tool_use id used twice is taken: below)."""

from __future__ import annotations

import pytest

from anthropic_util import assert_envelope, body, post

TOOLS = [{"name": "f", "input_schema": {"type": "object"}}]
USER = {"role": "user", "content": "hi"}


def call(*ids: str) -> dict:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]}


def results(*ids: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids]}


THOUGHT = {"type": "thinking", "thinking": "hmm", "signature": "s"}

# (messages, the error's message)
REFUSED = [
    ([{"role": "user", "content": ""}],
     "messages.0: all messages must have non-empty content except for the optional final assistant message"),
    ([USER, {"role": "assistant", "content": "ok"}, {"role": "user", "content": []}],
     "messages.2: all messages must have non-empty content except for the optional final assistant message"),
    ([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]}],
     "messages: text content blocks must be non-empty"),
    ([{"role": "user", "content": [THOUGHT, {"type": "text", "text": "hi"}]}],
     "messages.0.content.0: thinking blocks may only be in `assistant` messages"),
    ([USER, {"role": "assistant", "content": "ok"},
      {"role": "user", "content": [{"type": "redacted_thinking", "data": "x"}, {"type": "text", "text": "go on"}]}],
     "messages.2.content.0: thinking blocks may only be in `assistant` messages"),
]


@pytest.mark.parametrize("messages,message", REFUSED, ids=[m for _, m in REFUSED])
async def test_refused_in_the_apis_words(serve, messages, message):
    s = await serve(["never generated"])
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = await post(s, body(messages=messages, tools=TOOLS), path)
        d = assert_envelope(r, 400, "invalid_request_error")
        assert d["error"]["message"] == message, d  # (the API's spelling of the place: clients match the words)


ACCEPTED = [
    [USER, call("toolu_1"), results("toolu_1"), call("toolu_2", "toolu_3"), results("toolu_2", "toolu_3")],
    [USER, {"role": "assistant", "content": ""}],   # an empty final assistant turn: a prefill of nothing
    [USER, {"role": "assistant", "content": []}],
    [USER, {"role": "assistant", "content": [THOUGHT, {"type": "text", "text": "ok"}]}, {"role": "user", "content": "more"}],
    [{"role": "user", "content": [{"type": "text", "text": "a"}]}, {"role": "user", "content": "b"}],
    # a tool_use id used twice: the API refuses it, but Claude Code and OpenCode have shipped bugs that send
    # one, and here an id only pairs a result with its call, so it is taken
    [USER, call("toolu_1"), results("toolu_1"), call("toolu_1"), results("toolu_1")],
]


@pytest.mark.parametrize("messages", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
async def test_accepted_as_the_api_accepts(serve, messages):
    s = await serve(["ok"])
    r = await post(s, body(messages=messages, tools=TOOLS))
    assert r.status_code == 200, r.text
