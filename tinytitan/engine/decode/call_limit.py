"""At most so many tool calls a turn: ``parallel_tool_calls: false`` (one), Responses' ``max_tool_calls``,
Anthropic's ``disable_parallel_tool_use``.

Rules:
- Where the family's call markup has a grammar (``structured/tool_calls.py``), the mask ends the turn
  after the last call allowed: the model cannot open another, and end-of-sequence is all that is left.
- Everywhere (the mask's families too, and the scripted backend), the output parser is wrapped here: once
  the last call allowed is complete, the turn is over for the client — nothing after it is sent (a further
  call, or text, is logged and dropped), so the limit holds whatever the model writes.
- Without a mask, the turn is also over for the decoder (``turn_over``): once the block holding the last call
  allowed is closed (its closing marker read, so the block is checked against its grammar like any other),
  the decode loop stops there, as at a stop string, instead of decoding on for nothing. (Under a mask, the
  call's closing marker and the end of sequence are all the model can write after it.)
"""

from __future__ import annotations

import logging

from ...events import ToolCallDone, TokenEvent
from .output_parser import WrappedParser

log = logging.getLogger("tinytitan.engine")


def call_limit(req) -> int | None:
    """The most tool calls a turn may make (None: no limit): one without parallel calls, and never more than
    ``max_tool_calls``."""
    limits = [n for n in (None if req.parallel_tool_calls else 1, req.max_tool_calls) if n is not None]
    return min(limits) if limits else None


class CallLimit(WrappedParser):
    """An output parser that lets through at most ``limit`` tool calls, and nothing after the last."""

    def __init__(self, parser, limit: int, stops_decoding: bool = True):
        super().__init__(parser)
        self.limit = limit
        self.stops_decoding = stops_decoding  # False under a grammar mask, which ends the turn itself
        self.done = 0  # calls completed so far
        self.dropped = 0  # events withheld after the limit

    @property
    def turn_over(self) -> bool:
        """The last call allowed is complete, its block closed, and no mask ends the turn: decoding stops here."""
        return self.stops_decoding and self.done >= self.limit and not getattr(self.parser, "in_call_block", False)

    @property
    def tool_calls(self) -> int:
        return min(self.parser.tool_calls, self.limit)

    def finish(self, cut: bool = False) -> list[TokenEvent]:
        events = self._keep(self.parser.finish(cut))
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
