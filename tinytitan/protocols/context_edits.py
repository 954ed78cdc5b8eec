"""Anthropic's context editing (``context_management.edits``, the ``context-management-2025-06-27`` beta), applied
to the conversation before it reaches the model, as the API documents it.

``clear_tool_uses_20250919``: once the prompt passes ``trigger`` (``{"type": "input_tokens", "value": N}``, the
default 100,000, or ``{"type": "tool_uses", "value": N}``), the oldest tool results are replaced by a placeholder
that tells the model they were removed, all but the ``keep`` most recent tool uses (``{"type": "tool_uses",
"value": N}``, default 3); ``exclude_tools`` are never cleared; ``clear_tool_inputs`` (true, or a list of tool
names) clears those calls' inputs too; ``clear_at_least`` (``{"type": "input_tokens", "value": N}``) leaves the
conversation whole unless at least that many tokens go. The client keeps its full history: each request is
edited afresh, and the answer says what was done (``context_management.applied_edits``: ``cleared_tool_uses``,
``cleared_input_tokens``).

``clear_thinking_20251015``: thinking sent back is its turn's reasoning (the template renders it where the model saw
it); the edit clears it from all but the ``keep`` most recent assistant turns that have some (``{"type":
"thinking_turns", "value": N}``, default 1; ``"all"`` or ``{"type": "all"}`` keeps every one), reported as
``cleared_thinking_turns`` and ``cleared_input_tokens``. Listed first, as the API requires, it runs first.

Rules:
- A malformed edit is a 400 naming its path; token counts are the prompt as generation renders it.
- No I/O but the token count the caller hands in.
"""

from __future__ import annotations

import dataclasses
from typing import Awaitable, Callable

from ..chat_request import ChatRequest
from ..errors import invalid

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
PLACEHOLDER = "[This tool result was cleared to save context.]"
DEFAULT_TRIGGER = {"type": "input_tokens", "value": 100_000}
DEFAULT_KEEP = {"type": "tool_uses", "value": 3}


@dataclasses.dataclass(frozen=True)
class ClearToolUses:
    trigger_kind: str  # input_tokens | tool_uses
    trigger: int
    keep: int
    clear_at_least: int | None
    exclude: frozenset[str]
    clear_inputs: bool | frozenset[str]


@dataclasses.dataclass(frozen=True)
class ClearThinking:
    keep: int | None  # the most recent assistant turns whose thinking stays; None: all of them


def _threshold(value, where: str, kinds: tuple[str, ...]) -> tuple[str, int]:
    if not isinstance(value, dict) or value.get("type") not in kinds:
        raise invalid(f"'{where}' must be an object whose type is one of {', '.join(kinds)}", param=where)
    n = value.get("value")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise invalid(f"'{where}.value' must be a non-negative integer", param=f"{where}.value")
    return value["type"], n


def _names(value, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise invalid(f"'{where}' must be a list of tool names", param=where)
    return frozenset(value)


def _keep_thinking(value, where: str) -> int | None:
    if value is None:
        return 1
    if value == "all" or (isinstance(value, dict) and value.get("type") == "all"):
        return None
    return _threshold(value, where, ("thinking_turns",))[1]


def parse(context_management) -> list[ClearToolUses | ClearThinking]:
    """The request's ``context_management`` → its edits (a malformed one: 400 naming it)."""
    if not isinstance(context_management, dict):
        return []
    edits = context_management.get("edits") or []
    if not isinstance(edits, list):
        raise invalid("'context_management.edits' must be a list", param="context_management.edits")
    out = []
    for i, edit in enumerate(edits):
        where = f"context_management.edits[{i}]"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == CLEAR_THINKING:
            out.append(ClearThinking(_keep_thinking(edit.get("keep"), f"{where}.keep")))
            continue
        if kind != CLEAR_TOOL_USES:
            raise invalid(f"'{where}.type' must be {CLEAR_TOOL_USES} or {CLEAR_THINKING}", param=f"{where}.type")
        trigger_kind, trigger = _threshold(edit.get("trigger") or DEFAULT_TRIGGER, f"{where}.trigger",
                                           ("input_tokens", "tool_uses"))
        _, keep = _threshold(edit.get("keep") or DEFAULT_KEEP, f"{where}.keep", ("tool_uses",))
        at_least = edit.get("clear_at_least")
        at_least = None if at_least is None else _threshold(at_least, f"{where}.clear_at_least", ("input_tokens",))[1]
        inputs = edit.get("clear_tool_inputs") or False
        if not isinstance(inputs, bool):
            inputs = _names(inputs, f"{where}.clear_tool_inputs")
        exclude = _names(edit.get("exclude_tools") or [], f"{where}.exclude_tools")
        out.append(ClearToolUses(trigger_kind, trigger, keep, at_least, exclude, inputs))
    return out


def _thinking_cleared(req: ChatRequest, edit: ClearThinking) -> tuple[ChatRequest, int]:
    """``req`` with the thinking of older assistant turns cleared, and how many turns lost theirs."""
    turns = [i for i, m in enumerate(req.messages) if m.role == "assistant" and m.reasoning]
    clear = set(turns if edit.keep == 0 else turns[:-edit.keep]) if edit.keep is not None else set()
    if not clear:
        return req, 0
    return req.with_(messages=tuple(dataclasses.replace(m, reasoning=None) if i in clear else m
                                    for i, m in enumerate(req.messages))), len(clear)


def _cleared(req: ChatRequest, edit: ClearToolUses) -> tuple[ChatRequest, int]:
    """``req`` with the edit's tool uses cleared, and how many were."""
    uses = [call for m in req.messages if m.role == "assistant" for call in m.tool_calls]
    recent = {call.id for call in uses[max(len(uses) - edit.keep, 0):]} if edit.keep else set()
    clear = {call.id: call.name for call in uses if call.id not in recent and call.name not in edit.exclude}
    if not clear:
        return req, 0

    def inputs_go(name: str) -> bool:
        return edit.clear_inputs is True or (isinstance(edit.clear_inputs, frozenset) and name in edit.clear_inputs)

    messages = []
    for m in req.messages:
        if m.role == "tool" and m.tool_call_id in clear:
            m = dataclasses.replace(m, content=PLACEHOLDER, parts=())
        elif m.role == "assistant" and any(c.id in clear and inputs_go(c.name) for c in m.tool_calls):
            m = dataclasses.replace(m, tool_calls=tuple(
                dataclasses.replace(c, arguments="{}") if c.id in clear and inputs_go(c.name) else c
                for c in m.tool_calls))
        messages.append(m)
    return req.with_(messages=tuple(messages)), len(clear)


async def apply(edits: list[ClearToolUses | ClearThinking], req: ChatRequest,
                count: Callable[[ChatRequest], Awaitable[int]]) -> tuple[ChatRequest, list[dict]]:
    """``req`` with each edit applied where its trigger is passed, and the applied edits as the API reports
    them. ``count``: the prompt's tokens as generation renders it."""
    applied: list[dict] = []
    for edit in edits:
        if isinstance(edit, ClearThinking):
            edited, n = _thinking_cleared(req, edit)
            if n:
                freed = max(0, await count(req) - await count(edited))
                req = edited
                applied.append({"type": CLEAR_THINKING, "cleared_thinking_turns": n, "cleared_input_tokens": freed})
            continue
        before = None
        if edit.trigger_kind == "tool_uses":
            passed = sum(len(m.tool_calls) for m in req.messages if m.role == "assistant") > edit.trigger
        else:
            before = await count(req)
            passed = before > edit.trigger
        if not passed:
            continue
        edited, n = _cleared(req, edit)
        if not n:
            continue
        freed = max(0, (before if before is not None else await count(req)) - await count(edited))
        if edit.clear_at_least is not None and freed < edit.clear_at_least:
            continue
        req = edited
        applied.append({"type": CLEAR_TOOL_USES, "cleared_tool_uses": n, "cleared_input_tokens": freed})
    return req, applied
