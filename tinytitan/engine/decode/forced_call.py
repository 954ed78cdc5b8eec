"""A forced call (``tool_choice: "required"``, a named tool, Anthropic's ``any`` / ``tool``) cut short.

Rules:
- Under a forced call the grammar admits only calls, so any text the family's parser gives back is call
  markup it could not read yet: a call cut short (by the output cap) before its name and arguments were
  known. That text is never sent as the answer's text. A forced turn that ends with no call read (only its
  opening marker written) was cut short the same way.
- At the end, such a call is a call with incomplete arguments (``complete=False``): its name is the one
  tool allowed, or the longest allowed name the markup already spells; where neither is known, nothing is
  sent for it (logged).
"""

from __future__ import annotations

import logging

from ...events import TextDelta, ToolCallDone, ToolCallStarted, TokenEvent
from ...logtext import excerpt
from .output_parser import WrappedParser
from ..families.markup import new_call_id

log = logging.getLogger("tinytitan.engine")


class ForcedCall(WrappedParser):
    """An output parser for a forced call: held-back markup becomes an incomplete call, never text."""

    def __init__(self, parser, names: list[str], namespaces: dict[str, str]):
        super().__init__(parser)
        self.names = names
        self.namespaces = namespaces
        self.held = ""  # markup the parser gave back as text
        self.calls = 0  # calls started so far
        self.cut: int = 0  # calls made up here from held markup

    @property
    def tool_calls(self) -> int:
        return self.parser.tool_calls + self.cut

    def finish(self, cut: bool = False) -> list[TokenEvent]:
        events = self._keep(self.parser.finish())  # markup cut short comes back as text: named below
        if not self.held.strip() and self.calls:  # every call was read (a forced turn has one at least)
            return events
        name = self._name(self.held)
        if name is None:
            log.warning("a forced call was cut short before its tool was known: %s not sent", excerpt(log, self.held))
            return events
        index, self.cut = self.calls, self.cut + 1
        return events + [ToolCallStarted(index, new_call_id(), name, self.namespaces.get(name)),
                         ToolCallDone(index, "", complete=False)]

    def _keep(self, events: list[TokenEvent]) -> list[TokenEvent]:
        out = []
        for ev in events:
            if isinstance(ev, TextDelta):
                self.held += ev.text
                continue
            if isinstance(ev, ToolCallStarted):
                self.calls = max(self.calls, ev.index + 1)
                self.held = ""  # what was held opened this call
            out.append(ev)
        return out

    def _name(self, markup: str) -> str | None:
        if len(self.names) == 1:
            return self.names[0]
        spelled = [n for n in self.names if n in markup]
        return max(spelled, key=len) if spelled else None
