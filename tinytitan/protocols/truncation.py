"""Responses' ``truncation: "auto"``: a conversation that does not fit the model's context window loses
items from its start until it fits, as the API documents.

Rules:
- What goes first is the oldest turn: a user message with the assistant messages, calls and results that
  answer it (a call is never kept without its result, nor a result without its call). System messages (the
  instructions, the client's developer prompt, compaction summaries) are never dropped, nor is the newest
  user turn with everything after it (starting at the call's turn, where it holds the result of an earlier
  call).
- The prompt is counted as the model reads it (the engine's own count); turns are dropped in proportion to
  the excess (by characters), then counted again, so a long history costs a few counts, not one per turn.
- A tool a dropped turn loaded (a deferred tool its ``tool_references`` declared) is declared with the others
  from then on: the turns kept may still call it.
- What still does not fit (the newest turn alone is too long) is left to the engine, which refuses it with
  ``context_length_exceeded`` as it does under ``"disabled"``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Awaitable, Callable

from ..chat_request import ChatRequest, Message
from ..errors import ApiError

log = logging.getLogger("tinytitan.responses")


def turns(messages: tuple[Message, ...]) -> tuple[list[list[int]], int]:
    """The droppable turns, oldest first (each a list of message indices), and the index where the newest
    user turn begins (kept whole). A user message between a call and its result (a client may send one there)
    does not part them: the turns from the call's to the result's are one."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    newest = users[-1] if users else len(messages)
    caller = {call.id: i for i, m in enumerate(messages) for call in m.tool_calls}

    def back_to_turn(i: int) -> int:  # the user message that opened the turn of message i (or i itself)
        return next((u for u in reversed(users) if u <= i), i)

    moved = True
    while moved:  # a result in the newest turn whose call is before it: the newest turn starts at the call's turn
        calls = [caller[m.tool_call_id] for m in messages[newest:] if m.role == "tool" and m.tool_call_id in caller]
        first = min((i for i in calls if i < newest), default=None)
        moved = first is not None
        if moved:
            newest = back_to_turn(first)
    groups: list[list[int]] = []
    group_of: dict[int, int] = {}
    for i, m in enumerate(messages[:newest]):
        if m.role == "system":
            continue
        if m.role == "user" or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
        group_of[i] = len(groups) - 1
        called = caller.get(m.tool_call_id) if m.role == "tool" else None
        if called is not None and group_of.get(called, len(groups) - 1) < len(groups) - 1:
            g = group_of[called]  # the result's call is in an earlier turn: those turns go (or stay) together
            groups[g:] = [[j for group in groups[g:] for j in group]]
            group_of.update({j: g for j in groups[g]})
    return groups, newest


def _still_declared(tools: tuple, kept: tuple[Message, ...], lost: list[Message]) -> tuple:
    """``tools``, those only the ``lost`` messages loaded now declared up front (no longer deferred)."""
    gone = {name for m in lost for name in m.tool_references} - {name for m in kept for name in m.tool_references}
    return tuple(replace(t, deferred=False) if t.deferred and t.name in gone else t for t in tools)


def _size(m: Message) -> int:
    return len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)


async def fit(req: ChatRequest, window: int, count: Callable[[ChatRequest], Awaitable[int]]) -> ChatRequest:
    """``req`` with its oldest turns dropped until its prompt leaves room for one token in ``window``."""
    try:
        tokens = await count(req)
    except ApiError as exc:
        if exc.code != "not_implemented":
            raise
        return req  # a backend that cannot count (no tokenizer) has no window to fit
    dropped = 0
    while tokens >= window:
        groups, _ = turns(req.messages)
        if not groups:
            break
        total = sum(_size(m) for m in req.messages) or 1
        goal = total * (tokens - window + 1) / tokens  # the characters to lose, in proportion to the excess
        cut, lost = set(), 0
        for group in groups:
            if cut and lost >= goal:
                break
            cut.update(group)
            lost += sum(_size(req.messages[i]) for i in group)
        dropped += len(cut)
        kept = tuple(m for i, m in enumerate(req.messages) if i not in cut)
        req = req.with_(messages=kept, tools=_still_declared(req.tools, kept, [req.messages[i] for i in cut]))
        tokens = await count(req)
    if dropped:
        log.info("truncation auto: dropped the %d oldest message(s) to fit the context window of %d tokens "
                 "(%d tokens now)", dropped, window, tokens)
    return req
