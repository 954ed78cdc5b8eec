"""Responses' ``truncation: "auto"``: a conversation that does not fit the model's context window loses
items from its start until it fits, as the API documents.

Rules:
- What goes first is the oldest turn: a user message with the assistant messages, calls and results that
  answer it (a call is never kept without its result, nor a result without its call). System messages (the
  instructions, the client's developer prompt, compaction summaries) are never dropped, nor is the newest
  user turn with everything after it.
- The prompt is counted as the model reads it (the engine's own count); turns are dropped in proportion to
  the excess (by characters), then counted again, so a long history costs a few counts, not one per turn.
- What still does not fit (the newest turn alone is too long) is left to the engine, which refuses it with
  ``context_length_exceeded`` as it does under ``"disabled"``.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from ..chat_request import ChatRequest, Message
from ..errors import ApiError

log = logging.getLogger("tinytitan.responses")


def turns(messages: tuple[Message, ...]) -> tuple[list[list[int]], int]:
    """The droppable turns, oldest first (each a list of message indices), and the index where the newest
    user turn begins (kept whole)."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    newest = users[-1] if users else len(messages)
    groups: list[list[int]] = []
    for i, m in enumerate(messages[:newest]):
        if m.role == "system":
            continue
        if m.role == "user" or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups, newest


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
        req = req.with_(messages=tuple(m for i, m in enumerate(req.messages) if i not in cut))
        tokens = await count(req)
    if dropped:
        log.info("truncation auto: dropped the %d oldest message(s) to fit the context window of %d tokens "
                 "(%d tokens now)", dropped, window, tokens)
    return req
