"""What every tool-call body decoder shares: call numbering, the Body interface, stepped bodies (see
``bodies/make.py`` for the decoders and why they exist)."""

from __future__ import annotations

import logging

from ....events import TextDelta, ToolCallArgsDelta, ToolCallDone, ToolCallStarted, TokenEvent
from ....logtext import excerpt
from ..grown import Grown
from ..markup import Markup, new_call_id

log = logging.getLogger("tinytitan.parser")


class Calls:
    """Call numbering shared by every body of one generation."""

    def __init__(self, namespaces: dict[str, str] | None = None, tools: dict[str, dict] | None = None):
        self.namespaces = namespaces or {}
        self.tools = tools or {}  # name -> JSON schema of its parameters
        self.next = 0
        self.count = 0

    def start(self, name: str) -> ToolCallStarted:
        idx = self.next
        self.next += 1
        self.count += 1
        return ToolCallStarted(idx, new_call_id(), name, self.namespaces.get(name))

    def param_type(self, name: str, key: str) -> str | None:
        props = (self.tools.get(name) or {}).get("properties") or {}
        t = (props.get(key) or {}).get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), None)
        return str(t).lower() if t else None


class Body:
    """Base: ``feed`` / ``close``. ``rejected`` (tentative bodies only): this was never a call, here is the
    text back. ``leftover``: the call is complete and this text follows it (the parser takes it back)."""

    raw = Grown()  # the block's text as fed (``Body.raw.grow``)
    args = Grown()  # the current call's arguments as streamed (``Body.args.grow``)

    def __init__(self, calls: Calls, markup: Markup, tentative: bool = False):
        self.calls = calls
        self.m = markup
        self.tentative = tentative  # no opening marker: give up at the first sign it is not a call
        self.raw = ""
        self.rejected: str | None = None
        self.leftover: str | None = None
        self.index: int | None = None
        self.any = False  # some call started
        self.warned = False  # text after a call was logged (once per block: _text_after_call)
        self._after_ws = ""  # whitespace of that text held until more of it follows
        self.format = markup.body  # the grammar that checks the completed block (set by make_body)
        self.done_at: int | None = None  # where in ``raw`` the last call ended, while no other has begun

    def feed(self, text: str) -> list[TokenEvent]:
        raise NotImplementedError

    def close(self, truncated: bool) -> list[TokenEvent]:
        raise NotImplementedError

    @property
    def quoting(self) -> bool:
        """Whether what was fed so far stops inside a quoted argument value (a JSON or Python string, an
        XML-ish parameter value): a closing marker that comes now is part of the value, not the call's end —
        a model writing about its own call format (``"content": "… <tool_call>{…}</tool_call> …"``)."""
        return False

    @property
    def between_calls(self) -> bool:
        """A call is complete and nothing but whitespace has followed it: the family's opener here begins the
        next block, the model having left out this one's closer (``<tool_call>{…}\n<tool_call>{…}</tool_call>``)."""
        return self.done_at is not None and not self.raw[self.done_at:].strip()

    # helpers
    def _start(self, name: str, out: list) -> None:
        ev = self.calls.start(name)
        self.index = ev.index
        self.any = True
        self.done_at = None
        out.append(ev)

    def _text_after_call(self, text: str, out: list, call: str = "a tool call inside its markup") -> None:
        """Text the model wrote after a complete call, still inside the call's block, fed piece by piece as it
        arrives: returned as text (its leading and trailing whitespace are layout, the whitespace inside it is
        kept whatever the pieces), and logged once per block."""
        if not self.warned:
            text = text.lstrip()
            if not text:
                return
            log.warning("text after %s; returned as text: %s", call, excerpt(log, text))
            self.warned = True
        body = text.rstrip()
        if body:
            out.append(TextDelta(self._after_ws + body))
            self._after_ws = text[len(body):]
        else:
            self._after_ws += text

    def _as_text(self, truncated: bool) -> list[TokenEvent]:
        log.warning("tool-call markup not understood; returned as text: %s", excerpt(log, self.raw))
        if self.tentative:
            return [TextDelta(self.raw)] if self.raw else []
        text = (self.m.tool_open or "") + self.raw + ("" if truncated else (self.m.tool_close or ""))
        return [TextDelta(text)]


class SteppedBody(Body):
    """A body read by a small state machine: ``_step`` consumes from ``buf`` and says whether it progressed;
    argument text goes out through ``_emit``, which also keeps the whole arguments string."""

    buf: str
    args: str

    def _emit(self, out: list, text: str) -> None:
        if text:
            Body.args.grow(self, text)
            out.append(ToolCallArgsDelta(self.index, text))

    def feed(self, text: str) -> list[TokenEvent]:
        Body.raw.grow(self, text)
        self.buf += text
        out: list[TokenEvent] = []
        while self.buf:
            n = len(out)
            progressed = self._step(out)
            if any(isinstance(ev, ToolCallDone) for ev in out[n:]):
                self.done_at = len(self.raw) - len(self.buf)
            if not progressed:
                break
        return out

    def _step(self, out: list) -> bool:
        raise NotImplementedError
