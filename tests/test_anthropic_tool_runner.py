"""The SDKs' tool runner (``client.beta.messages.tool_runner``, TypeScript ``toolRunner``) sends each turn with
``thread: {"type": "create"}`` (the message-threads beta) and goes on without a thread only where the server
answers ``thread_unsupported_request`` in ``error.details``: a server without threads must say it that way."""

from __future__ import annotations

import anthropic
from anthropic import beta_async_tool

import strict
from anthropic_util import MODEL, body, post, sdk

TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


async def test_the_sdk_tool_runner_runs_its_loop(serve):
    s = await serve([TOOL_CALL, "It is sunny in Paris."])
    ran = []

    @beta_async_tool
    async def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(city)
        return "sunny"

    runner = sdk(s).beta.messages.tool_runner(model=MODEL, max_tokens=100, tools=[get_weather],
                                              messages=[{"role": "user", "content": "weather?"}])
    replies = [m async for m in runner]
    assert ran == ["Paris"]
    assert [m.stop_reason for m in replies] == ["tool_use", "end_turn"]
    assert replies[-1].content[0].text == "It is sunny in Paris."


async def test_thread_is_refused_as_the_api_refuses_what_threads_do_not_support(serve):
    s = await serve(["Hello."])
    r = await post(s, body(thread={"type": "create"}),
                   headers={"anthropic-beta": "message-threads-2026-08-12"})
    assert r.status_code == 400, r.text
    strict.anthropic_error(r.content)
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and "'thread'" in error["message"]
    assert error["details"]["error_code"] == "thread_unsupported_request"
