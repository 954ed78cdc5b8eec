"""At most so many tool calls a turn: ``parallel_tool_calls: false`` (one), Responses' ``max_tool_calls``,
Anthropic's ``disable_parallel_tool_use``.

Rules:
- Where the family's call markup has a grammar (``structured/tool_calls.py``), the mask ends the turn
  after the last call allowed: the model cannot open another, and end-of-sequence is all that is left.
- Everywhere (the mask's families too, and the scripted backend), the output parser is wrapped here: once
  the last call allowed is complete, the turn is over for the client — nothing after it is sent (a further
  call, or text, is logged and dropped), so the limit holds whatever the model writes.
"""

from __future__ import annotations

import logging

from ..events import ToolCallDone, TokenEvent
from .output_parser import WrappedParser

log = logging.getLogger("tinytitan.engine")


def call_limit(req) -> int | None:
    """The most tool calls a turn may make (None: no limit): one without parallel calls, and never more than
    ``max_tool_calls``."""
    limits = [n for n in (None if req.parallel_tool_calls else 1, req.max_tool_calls) if n is not None]
    return min(limits) if limits else None


class CallLimit(WrappedParser):
    """An output parser that lets through at most ``limit`` tool calls, and nothing after the last."""

    def __init__(self, parser, limit: int):
        super().__init__(parser)
        self.limit = limit
        self.done = 0  # calls completed so far
        self.dropped = 0  # events withheld after the limit

    @property
    def tool_calls(self) -> int:
        return min(self.parser.tool_calls, self.limit)

    def finish(self) -> list[TokenEvent]:
        events = self._keep(self.parser.finish())
        if self.dropped:
            log.warning("the turn ended at its limit of %d tool call(s): %d later event(s) not sent", self.limit,
                        self.dropped)
        return events

    def _keep(self, events: list[TokenEvent]) -> list[TokenEvent]:
        out = []
        for ev in events:
            if self.done >= self.limit:
                self.dropped += 1
                continue
            out.append(ev)
            if isinstance(ev, ToolCallDone):
                self.done += 1
        return out
