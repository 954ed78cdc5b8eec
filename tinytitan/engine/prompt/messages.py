"""ChatRequest → the message and tool dicts a Hugging Face chat template expects.

Roles a template does not know never reach it: the ChatRequest already has only system / user /
assistant / tool. Tool-call arguments are given to the template as objects (templates ``tojson`` them).
"""

from __future__ import annotations

import json
import re

from ...chat_request import ChatRequest, ImagePart, Message, Tool


def template_arguments(text: str):
    """A call's arguments as the template gets them: the JSON value, {} for none, the text where it is no JSON."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return text
    return value


def template_message(m: Message) -> dict:
    d: dict = {"role": m.role, "content": m.content}
    if m.parts:  # a message with images: its parts in order, as vision templates read them
        d["content"] = [{"type": "image"} if isinstance(p, ImagePart) else {"type": "text", "text": p} for p in m.parts]
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": template_arguments(c.arguments)}}
            for c in m.tool_calls
        ]
    if m.role == "tool" and m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    if m.name:  # a tool's name, or the participant's (templates that name turns read ``message.name``)
        d["name"] = m.name
    if m.reasoning:
        d["reasoning_content"] = m.reasoning
    return d


def template_messages(req: ChatRequest, default_system: str | None = None,
                      default_history: tuple[Message, ...] = ()) -> list[dict]:
    """The conversation as the template reads it. ``default_system``: the model's own system prompt, first in a
    conversation that does not open with a system message (as Ollama applies a Modelfile's ``SYSTEM``: the
    request's own system message wins). ``default_history``: the model's own turns (a Modelfile's
    ``MESSAGE`` lines), after the leading system message and before the request's turns."""
    messages = [template_message(m) for m in req.messages]
    lead = 1 if messages and messages[0]["role"] == "system" else 0
    if default_system and not lead:
        messages.insert(0, {"role": "system", "content": default_system})
        lead = 1
    note = req.closing_note
    if note:  # closes the system prompt, whichever it is (the request's own, or the model's)
        if lead:
            text = messages[0]["content"]
            messages[0] = {**messages[0], "content": f"{text}\n\n{note}" if text else note}
        else:
            messages.insert(0, {"role": "system", "content": note})
            lead = 1
    messages[lead:lead] = [template_message(m) for m in default_history]
    return messages


def template_tool(t: Tool) -> dict:
    return {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}


def template_tools(req: ChatRequest) -> list[dict] | None:
    """The tool header: every tool offered but the deferred ones (a tool message that references one carries
    its definition instead, so loading it only appends to the prompt)."""
    if not req.tools or req.tool_choice == "none":
        return None
    return [template_tool(t) for t in req.tools if not t.deferred] or None


FAST_SYSTEM = "You are a helpful assistant. Answer briefly and plainly."

# Claude Code's scaffolding inside turns: its context blocks ("As you answer the user's questions, you can use
# the following context …"), and a system message sent mid-conversation, which reaches a ChatRequest as a user
# turn wrapped the same way (see protocols/common.py's place_system).
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.S)


def fast_path(req: ChatRequest) -> ChatRequest:
    """The ``<id>-fast`` model: the coding client's scaffolding is stripped so a question gets a quick plain
    answer; thinking is off. Gone: its tools and tool traffic, every system message (the leading one and any
    later, such as Claude Code's agent-types list after the question), and ``<system-reminder>`` blocks inside
    turns. What is left is the conversation the user had, under one short system prompt."""
    kept = [Message("system", FAST_SYSTEM)]
    continues = False  # a prefill is continued only where its text is left (else the answer opens a turn)
    for i, m in enumerate(req.messages):
        if m.role not in ("user", "assistant"):
            continue
        bare = _REMINDER.sub("", m.content)
        text = bare.strip()
        if text and req.continue_final and i == len(req.messages) - 1:  # a prefill goes on from its last character
            text = bare.lstrip()
        images = any(isinstance(p, ImagePart) for p in m.parts)
        if images:  # a vision model's images stay, in their place
            kept.append(Message(m.role, text, parts=tuple(_REMINDER.sub("", p) if isinstance(p, str) else p
                                                          for p in m.parts)))
        elif text:
            kept.append(Message(m.role, text))
        else:
            continue
        continues = req.continue_final and i == len(req.messages) - 1
    return req.with_(messages=tuple(kept), system_note="", tools=(), tool_choice="none", tool_names=(),
                     reasoning=False, continue_final=continues)
