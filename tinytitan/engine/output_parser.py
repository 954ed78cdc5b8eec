"""Streaming output parser: raw model text, token by token, into channel events.

Rules:
- Markers come from a ``Markup`` (Qwen style by default: ``<think>…</think>``, ``<tool_call>{json}</tool_call>``).
- ``feed(piece)`` consumes one token's text and returns the events it completes plus the channel the
  token landed in (``reasoning``, ``text`` or ``tool``). A marker belongs to the channel it opens or
  closes. Text that might be the start of a marker is held back until it cannot be.
- Whitespace around markers is layout, not content: leading whitespace of a text run and trailing
  whitespace before a tool call or the end are dropped (whitespace inside the text is kept).
- A tool call's name is reported (ToolCallStarted) as soon as it is known; its arguments stream as deltas.
  Markup the model gets wrong comes back as plain text (and is logged); it never fails the request.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass

from ..events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallDone, ToolCallStarted, TokenEvent

log = logging.getLogger("tinytitan.parser")

REASONING, TEXT, TOOL = "reasoning", "text", "tool"


@dataclass(frozen=True)
class Markup:
    think_open: str | None = "<think>"
    think_close: str | None = "</think>"
    tool_open: str | None = "<tool_call>"
    tool_close: str | None = "</tool_call>"


QWEN = Markup()

_NAME_PREFIX = re.compile(r'^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class OutputParser:
    def __init__(self, markup: Markup = QWEN, start_in_reasoning: bool = False,
                 namespaces: dict[str, str] | None = None):
        self.m = markup
        self.channel = REASONING if start_in_reasoning else TEXT
        self.buf = ""  # unconsumed text (may hold a partial marker)
        self.pending_ws = ""  # whitespace-only text held until real text follows
        self.at_run_start = True  # strip leading whitespace of a text run
        self.tool_index = 0
        self.namespaces = namespaces or {}
        self.tool_calls = 0
        self._tool: _ToolCall | None = None

    # -- public ------------------------------------------------------------------------------------------
    def feed(self, piece: str) -> tuple[list[TokenEvent], str]:
        out: list[TokenEvent] = []
        touched = self.channel
        self.buf += piece
        while True:
            progressed, ch = self._step(out, final=False)
            if ch:
                touched = ch
            if not progressed:
                break
        return out, touched

    def finish(self) -> list[TokenEvent]:
        """End of generation: flush held text; an unclosed tool call is closed with what it has."""
        out: list[TokenEvent] = []
        while self._step(out, final=True)[0]:
            pass
        if self.channel == TOOL and self._tool is not None:
            out.extend(self._tool.close(self, truncated=True))
            self._tool = None
            self.channel = TEXT
        return out

    # -- internals -----------------------------------------------------------------------------------------
    def _markers(self) -> list[tuple[str, str]]:
        if self.channel == REASONING:
            cands = [(self.m.think_close, "close_think")]
        elif self.channel == TOOL:
            cands = [(self.m.tool_close, "close_tool")]
        else:
            cands = [(self.m.think_open, "open_think"), (self.m.tool_open, "open_tool")]
        return [(s, k) for s, k in cands if s]

    def _step(self, out: list[TokenEvent], final: bool) -> tuple[bool, str | None]:
        if not self.buf:
            return False, None
        best = None
        for s, kind in self._markers():
            i = self.buf.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s, kind)
        if best is not None:
            i, s, kind = best
            before, self.buf = self.buf[:i], self.buf[i + len(s):]
            self._content(before, out, final=True)
            self._switch(kind, out)
            return True, REASONING if kind.endswith("think") else TOOL
        # no whole marker: keep back a tail that could begin one
        keep = 0 if final else max((_partial_suffix(self.buf, s) for s, _ in self._markers()), default=0)
        emit_now, self.buf = (self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]) if keep else (self.buf, "")
        ch = self._content(emit_now, out, final=final)
        return False, ch

    def _content(self, text: str, out: list[TokenEvent], final: bool) -> str | None:
        if not text:
            return None
        if self.channel == TOOL:
            assert self._tool is not None
            out.extend(self._tool.feed(self, text))
            return TOOL
        if self.at_run_start:
            text = text.lstrip()
            if not text:
                return self.channel
            self.at_run_start = False
        if self.channel == REASONING:
            out.append(ReasoningDelta(text))
            return REASONING
        body = text.rstrip()
        if body:
            out.append(TextDelta(self.pending_ws + body))
            self.pending_ws = text[len(body):]
        else:
            self.pending_ws += text
        return TEXT

    def _switch(self, kind: str, out: list[TokenEvent]) -> None:
        self.at_run_start = True
        if kind == "open_think":
            self.pending_ws = ""
            self.channel = REASONING
        elif kind == "close_think":
            self.channel = TEXT
        elif kind == "open_tool":
            self.pending_ws = ""
            self.channel = TOOL
            self._tool = _ToolCall(self.tool_index)
        elif kind == "close_tool":
            assert self._tool is not None
            out.extend(self._tool.close(self, truncated=False))
            self._tool = None
            self.channel = TEXT


def _partial_suffix(buf: str, marker: str) -> int:
    """Length of the longest suffix of buf that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(buf)), 0, -1):
        if buf.endswith(marker[:n]):
            return n
    return 0


class _ToolCall:
    """One ``<tool_call>{"name": …, "arguments": …}</tool_call>`` body, streamed."""

    HOLD = 8  # characters held back: the closing ``}`` of the call object may be among them

    def __init__(self, index: int):
        self.index = index
        self.raw = ""
        self.started = False
        self.args_start = 0  # offset in raw where the arguments value begins
        self.sent = 0  # characters of raw already sent as argument deltas
        self.string_args = False

    def feed(self, parser: OutputParser, text: str) -> list[TokenEvent]:
        self.raw += text
        out: list[TokenEvent] = []
        if not self.started:
            m = _NAME_PREFIX.match(self.raw)
            if not m:
                return out
            rest = self.raw[m.end():]
            if not rest:
                return out  # wait to see how the value begins
            name = json.loads(f'"{m.group(1)}"')
            self.started = True
            self.string_args = rest.startswith('"')
            self.args_start = self.sent = m.end()
            out.append(ToolCallStarted(self.index, new_call_id(), name, parser.namespaces.get(name)))
        if not self.string_args:
            limit = len(self.raw.rstrip()) - self.HOLD
            if limit > self.sent:
                out.append(ToolCallArgsDelta(self.index, self.raw[self.sent:limit]))
                self.sent = limit
        return out

    def close(self, parser: OutputParser, truncated: bool) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        if not self.started:
            try:
                obj = json.loads(self.raw)
                name = obj["name"]
                args = obj.get("arguments", obj.get("parameters", {}))
                if not isinstance(name, str):
                    raise TypeError("name is not a string")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("tool-call markup not understood (%s); returned as text: %r", exc, self.raw[:200])
                text = (parser.m.tool_open or "") + self.raw + ("" if truncated else (parser.m.tool_close or ""))
                return [TextDelta(text)]
            args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            parser.tool_index += 1
            parser.tool_calls += 1
            return [ToolCallStarted(self.index, new_call_id(), name, parser.namespaces.get(name)),
                    ToolCallArgsDelta(self.index, args_text), ToolCallDone(self.index, args_text)]
        parser.tool_index += 1
        parser.tool_calls += 1
        body = self.raw[self.args_start:].rstrip()
        if body.endswith("}") and _parses(body[:-1].rstrip()):
            body = body[:-1].rstrip()  # the call object's own closing brace
        if self.string_args:
            try:
                args_text = json.loads(body)
                if not isinstance(args_text, str):
                    args_text = json.dumps(args_text)
            except ValueError:
                args_text = body
            out.append(ToolCallArgsDelta(self.index, args_text))
        else:
            args_text = body
            if len(body) > self.sent - self.args_start:
                out.append(ToolCallArgsDelta(self.index, body[self.sent - self.args_start:]))
            elif len(body) < self.sent - self.args_start:
                # we streamed past the argument value (a malformed call); the done event carries the truth
                log.warning("tool call %d: streamed arguments overran the value", self.index)
            try:
                json.loads(args_text or "{}")
            except ValueError:
                log.warning("tool call %d: arguments are not valid JSON: %r", self.index, args_text[:200])
        out.append(ToolCallDone(self.index, args_text))
        return out


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False
