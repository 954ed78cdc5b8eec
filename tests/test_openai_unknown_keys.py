"""Unknown keys inside Chat Completions' and Responses' option objects (tool_choice, stream_options,
reasoning, text) are refused by name, in OpenAI's words ("Unknown parameter: 'reasoning.foo'."); the keys the
API and its clients send stay accepted."""

from __future__ import annotations

import httpx
import pytest

MODEL = "tinytitan-scripted"
CHAT_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": CHAT_TOOLS}
RESPONSES = {"model": MODEL, "input": "hi", "tools": TOOLS}

# (route, request body changes, the place named)
REFUSED = [
    ("/v1/chat/completions", {"tool_choice": {"type": "function", "function": {"name": "f"}, "strict": True}},
     "tool_choice.strict"),
    ("/v1/chat/completions", {"stream": True, "stream_options": {"include_usage": True, "usage": True}},
     "stream_options.usage"),
    ("/v1/completions", {"prompt": "hi", "stream": True, "stream_options": {"include_usage": True, "x": 1}},
     "stream_options.x"),
    ("/v1/responses", {"reasoning": {"effort": "low", "budget": 100}}, "reasoning.budget"),
    ("/v1/responses", {"text": {"verbosity": "low", "format_type": "text"}}, "text.format_type"),
    ("/v1/responses", {"tool_choice": {"type": "function", "name": "f", "function": {"name": "f"}, "x": 1}},
     "tool_choice.x"),
    ("/v1/responses", {"stream_options": {"include_usage": True}}, "stream_options.include_usage"),
]


def payload(route: str, change: dict) -> dict:
    if route == "/v1/completions":
        return {"model": MODEL, **change}
    return {**(CHAT if route == "/v1/chat/completions" else RESPONSES), **change}


@pytest.mark.parametrize("route,change,where", REFUSED, ids=[w for _, _, w in REFUSED])
async def test_an_unknown_key_is_refused_by_name(serve, route, change, where):
    s = await serve(["never generated"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(route), json=payload(route, change))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["message"], error["param"], error["code"]) == (f"Unknown parameter: '{where}'.", where,
                                                                 "unknown_parameter")


ACCEPTED = [
    ("/v1/chat/completions", {"tool_choice": {"type": "allowed_tools", "allowed_tools": {
        "mode": "auto", "tools": [{"type": "function", "function": {"name": "f"}}]}}}),
    ("/v1/chat/completions", {"stream": True, "stream_options": {"include_usage": True, "include_obfuscation": False}}),
    ("/v1/responses", {"reasoning": {"effort": "medium", "summary": "auto"}}),   # Codex's
    ("/v1/responses", {"reasoning": {"effort": "low", "generate_summary": None, "context": "all_turns",
                                     "mode": "standard"}}),
    ("/v1/responses", {"text": {"verbosity": "low", "format": {"type": "text"}}}),
    ("/v1/responses", {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function",
                                                                                          "name": "f"}]}}),
    ("/v1/responses", {"stream": True, "stream_options": {"include_obfuscation": False}}),
]


@pytest.mark.parametrize("route,change", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
async def test_the_apis_keys_are_taken(serve, route, change):
    s = await serve(["ok"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(route), json=payload(route, change))
    assert r.status_code == 200, r.text
