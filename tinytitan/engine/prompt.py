"""ChatRequest → the message and tool dicts a Hugging Face chat template expects.

Roles a template does not know never reach it: the ChatRequest already has only system / user /
assistant / tool. Tool-call arguments are given to the template as objects (templates ``tojson`` them).
"""

from __future__ import annotations

import json

from ..chat_request import ChatRequest, Message


def _arguments(text: str):
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return text
    return value


def template_message(m: Message) -> dict:
    d: dict = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
            for c in m.tool_calls
        ]
    if m.role == "tool":
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
    if m.reasoning:
        d["reasoning_content"] = m.reasoning
    return d


def template_messages(req: ChatRequest) -> list[dict]:
    return [template_message(m) for m in req.messages]


def template_tools(req: ChatRequest) -> list[dict] | None:
    if not req.tools or req.tool_choice == "none":
        return None
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in req.tools
    ]


FAST_SYSTEM = "You are a helpful assistant. Answer briefly and plainly."


def fast_path(req: ChatRequest) -> ChatRequest:
    """The ``<id>-fast`` model: the coding client's scaffolding (its tools, its long system prompt, tool
    traffic) is stripped so a question gets a quick plain answer; thinking is off."""
    kept = [Message("system", FAST_SYSTEM)]
    for m in req.messages:
        if m.role in ("user", "assistant") and m.content.strip():
            kept.append(Message(m.role, m.content))
    return req.with_(messages=tuple(kept), tools=(), tool_choice="none", tool_names=(), reasoning=False)
