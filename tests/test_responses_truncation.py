"""Responses' ``truncation``: ``"auto"`` drops the oldest turns until the conversation fits the context window
(never the instructions or the newest user turn; a call goes with its result); ``"disabled"`` (the default)
keeps ``context_length_exceeded`` (protocols/truncation.py)."""

from __future__ import annotations

import openai
import pytest

from responses_helpers import client
from truncation_helpers import MODEL, TOOLS, WINDOW, history, server


async def test_auto_drops_the_oldest_turns_until_it_fits(serve, demo_tok):
    s, backend = await server(serve, demo_tok)
    r = await client(s).responses.create(model=MODEL, input=history(12), instructions="Be brief, always.",
                                         truncation="auto", store=False, tools=TOOLS)
    assert r.status == "completed" and r.output_text == "Fine." and r.truncation == "auto"
    prompt = backend.prompts[-1]
    assert "Be brief, always." in prompt and "the newest question" in prompt
    assert "question 0:" not in prompt and "question 11:" in prompt  # the oldest went first
    kept = [k for k in range(12) if f"question {k}:" in prompt]
    assert kept == list(range(kept[0], 12))
    for k in kept:  # a call is kept with its result, and a result with its call
        assert (f"result {k}" in prompt) and ('"k": %d' % k in prompt or '"k":%d' % k in prompt)
    assert r.usage.input_tokens < WINDOW


async def test_disabled_keeps_context_length_exceeded(serve, demo_tok):
    s, _ = await server(serve, demo_tok)
    for extra in ({}, {"truncation": "disabled"}):
        with pytest.raises(openai.BadRequestError) as err:
            await client(s).responses.create(model=MODEL, input=history(12), store=False, tools=TOOLS, **extra)
        assert err.value.code == "context_length_exceeded"


async def test_auto_cannot_drop_the_newest_turn(serve, demo_tok):
    s, _ = await server(serve, demo_tok)
    items = history(2)[:-1] + [{"type": "message", "role": "user", "content": "huge " * 2000}]
    with pytest.raises(openai.BadRequestError) as err:
        await client(s).responses.create(model=MODEL, input=items, truncation="auto", store=False, stream=True)
    assert err.value.code == "context_length_exceeded"


async def test_a_tool_a_dropped_turn_loaded_is_still_declared(serve, demo_tok):
    """A client-executed tool search in the oldest turn loaded a deferred tool; truncation drops that turn, and
    the tool is then declared with the others (the turns kept may still call it)."""
    from tool_search_helpers import MCP_ECHO, RESPONSES_SEARCH

    echo = {k: v for k, v in MCP_ECHO.items() if k != "defer_loading"}
    searched = [{"type": "message", "role": "user", "content": "find the echo tool " + "lorem ipsum " * 20},
                {"type": "tool_search_call", "call_id": "ts_1", "execution": "client",
                 "arguments": {"query": "echo"}, "status": "completed"},
                {"type": "tool_search_output", "call_id": "ts_1", "execution": "client", "status": "completed",
                 "tools": [echo]}]
    s, backend = await server(serve, demo_tok)
    r = await client(s).responses.create(model=MODEL, input=searched + history(12), truncation="auto",
                                         store=False, tools=TOOLS + [RESPONSES_SEARCH])
    assert r.status == "completed"
    prompt = backend.prompts[-1]
    assert "find the echo tool" not in prompt  # the search's turn was dropped …
    assert '"name": "mcp__demo__echo"' in prompt  # … and what it loaded is declared
