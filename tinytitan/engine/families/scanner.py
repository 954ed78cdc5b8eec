"""The streaming output parser for marker-delimited families: raw model text, token by token, into events.

Rules:
- Markers come from the family's ``Markup`` (``<think>…</think>``, ``<tool_call>…</tool_call>``,
  ``[THINK]…[/THINK]``, ``[TOOL_CALLS]…``, ``<|python_tag|>…``, ```` ```tool_code…``` ````).
- ``feed(piece)`` consumes one token's text and returns the events it completes plus the channel the
  token landed in (``reasoning``, ``text`` or ``tool``). A marker belongs to the channel it opens or
  closes. Text that might be the start of a marker is held back until it cannot be.
- Whitespace around markers is layout, not content: leading whitespace of a text run and trailing
  whitespace before a marker or the end are dropped (whitespace inside the text is kept). An answer that
  continues a prefill (``continues``) goes on inside its text run: its leading whitespace is kept.
- The inside of a tool call goes to the family's body decoder (``bodies/make.py``): the name is reported
  (ToolCallStarted) as soon as it is known; arguments stream as deltas.
- Families that may answer with a bare JSON call (Llama 3.x, Gemma) have an answer that begins with ``{``
  tried as a call; at the first sign it is not one, it is text.
- Markup the model gets wrong comes back as plain text (and is logged); it never fails the request. One slip is
  read as meant: a complete call followed, after only whitespace, by the next opener (its closer left out)
  ends there and the next call begins (logged). A JSON
  call the output cap cut before its tool was known (``<tool_call>{"name": "get_we``) is not text: it is
  dropped (logged).
- Every completed block (its closing marker, the next opening one for formats without a closer, the end of
  a bare call) is checked once against its format's Lark grammar (``grammar.check_block``): a disagreement
  with what was streamed is logged, never raised, and changes no event. A block cut short is not checked.
"""

from __future__ import annotations

import logging
import re

import regex

from ...events import ReasoningDelta, TextDelta, TokenEvent, ToolCallDone, ToolCallStarted
from ...logtext import excerpt
from . import grammar
from .bodies.make import Body, Calls, make_body
from .markup import QWEN, REASONING, TEXT, TOOL, Markup, find_first, hold_length

log = logging.getLogger("tinytitan.parser")

# the start of a JSON call's head, cut anywhere before its name is whole: '{', '{"na', '{"name": "get_we'
CALL_HEAD = re.compile(r'\s*\{\s*(?:"\w*"?\s*(?::\s*(?:"[^"\\]*)?)?)?\s*\Z')
# what a call's head is, per body syntax, up to where its call starts: a body the cap cut while all it holds is a
# prefix of one (``{"name": "get_weather", "argu``, ``<function=get_we``) is that head cut short
_JSON_HEAD = (r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,'
              r'\s*"(?:arguments|parameters)"\s*:\s*')
CALL_HEADS = {
    "json": regex.compile(r'\s*\[?\s*' + _JSON_HEAD),
    "xml": regex.compile(r'\s*<function=[^>\s]+>'),
    "kv": regex.compile(r'\s*[\w.\-]+\s*'),  # GLM: the name, then its <arg_key> lines
    # NAME[ARGS] (NAME[CALL_ID]ID[ARGS] where the tokenizer has [CALL_ID]), or the older list of JSON calls
    "mistral": regex.compile(r'\s*(?:[\w.\-]+(?:\[CALL_ID\][^\[\]\s]*)?\[ARGS\]|\[\s*' + _JSON_HEAD + ')'),
    "gemma4": regex.compile(r'\s*call:[\w.\-]+\{'),
    "function_gemma": regex.compile(r'\s*call:[\w.\-]+\{'),
    "pythonic": regex.compile(r'\s*\[?[\w.]+\('),
    "deepseek": regex.compile(r'\s*<｜tool▁call▁begin｜>\s*[^\s<>{}]+\s*<｜tool▁sep｜>'),
    # the older format: the type before the separator, the name after it (the call starts at the name's line end)
    "deepseek_r1": regex.compile(r'\s*<｜tool▁call▁begin｜>\s*[^\s<>{}]+\s*<｜tool▁sep｜>[^\s<>{}`]+\n'),
    "kimi": regex.compile(r'\s*<\|tool_call_begin\|>\s*(?:functions\.)?[\w.\-]+(?::\d+)?\s*'
                          r'<\|tool_call_argument_begin\|>'),
    "minimax": regex.compile(r'\s*<invoke name="[^"]*">'),
    "dsml": regex.compile(r'\s*<｜DSML｜invoke name="[^"]*">'),
}


# the shortest held tail the cap's end reads as a marker cut short, not text: "<", "<th" (HTML), "```" (a closing
# fence, where Gemma's opener is "```tool_code") end answers as text as often as they begin a marker
CUT_MARKER_MIN = 4


def cut_head(syntax: str, raw: str) -> bool:
    """``raw`` (a call body the output cap ended before any call started) is the head of a call cut short."""
    if CALL_HEAD.match(raw):
        return True
    head = CALL_HEADS.get(syntax)
    return head is not None and raw.strip() != "" and head.fullmatch(raw, partial=True) is not None


class OutputParser:
    def __init__(self, markup: Markup = QWEN, start_in_reasoning: bool = False,
                 namespaces: dict[str, str] | None = None, tools: dict[str, dict] | None = None,
                 continues: bool = False):
        self.m = markup
        self.channel = REASONING if start_in_reasoning and markup.think_close else TEXT
        self.buf = ""  # unconsumed text (may hold a partial marker)
        self.pending_ws = ""  # whitespace-only text held until real text follows
        self.at_run_start = not continues  # strip leading whitespace of a text run (a prefill's goes on)
        self.calls = Calls(namespaces, tools)
        self.bare_ok = markup.bare_json and not continues  # nothing but whitespace has been answered yet
        self._body: Body | None = None
        self._block_calls: list[TokenEvent] = []  # the current block's ToolCallStarted / ToolCallDone
        self._reparse: str | None = None
        self.ws_before_tool = ""

    @property
    def tool_calls(self) -> int:
        return self.calls.count

    @property
    def in_call_block(self) -> bool:
        """Inside a call block that a closing marker will end (its grammar check waits for that marker)."""
        return self.channel == TOOL and self._body is not None and bool(self.m.tool_close)

    @property
    def namespaces(self) -> dict[str, str]:
        return self.calls.namespaces

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

    def finish(self, cut: bool = False) -> list[TokenEvent]:
        """End of generation (``cut``: by the output cap): flush held text; an open tool call is closed with
        what it has."""
        out: list[TokenEvent] = []
        if cut and self.channel != TOOL:
            self._drop_cut_marker()
        while self._step(out, final=True)[0]:
            pass
        if self.channel == TOOL and self._body is not None:
            # formats without a closing marker end their last call at the end of the turn
            events = self._close_body(truncated=bool(self.m.tool_close))
            if cut and not self._body.tentative:
                events = self._without_cut_head(events)
            out.extend(events)
            self._body = None
            self.channel = TEXT
        if self.pending_ws:
            self.pending_ws = ""
        return out

    # -- internals -----------------------------------------------------------------------------------------
    def _drop_cut_marker(self) -> None:
        """The cap struck inside a marker of several tokens (``<｜DSML｜function_calls>``, ``<tool_call>`` spelt
        in pieces): the held tail that begins one is markup cut short, not text (logged). Without the cap the
        same tail is text: only the end of the output tells."""
        held = hold_length(self.buf, [s for s, _ in self._markers()])
        if held >= CUT_MARKER_MIN:  # (a shorter tail is as likely the answer's own: "<th", "x <", a closing "```")
            log.info("the output cap cut a marker short: %r not sent", self.buf[-held:])
            self.buf = self.buf[:-held]

    def _without_cut_head(self, events: list[TokenEvent]) -> list[TokenEvent]:
        """A call block's closing events less the head of a call the cap cut before its tool was known: the whole
        block's markup where no call started (a forced call's is made an incomplete call: forced_call.py), else
        the text after the calls that are whole (the next call of a section or a list). Markup that is no call's
        head stays text."""
        if not self._body.any:
            head, kept = self._body.raw, [ev for ev in events if not isinstance(ev, TextDelta)]
        elif events and isinstance(events[-1], TextDelta):
            head, kept = events[-1].text, events[:-1]
        else:
            return events
        if not cut_head(self.m.body, head):
            return events
        log.warning("a tool call was cut short before its tool was known: %s not sent", excerpt(log, head))
        return kept

    def _markers(self) -> list[tuple[str, str]]:
        m = self.m
        if self.channel == REASONING:
            cands = [(m.think_close, "close_think")] + ([(m.tool_open, "open_tool")] if m.tool_ends_thought else [])
        elif self.channel == TOOL:
            cands = [(m.tool_close, "close_tool")] if m.tool_close else [(m.tool_open, "next_tool")]
            if m.tool_close and self._body is not None and not self._body.tentative:
                if not self._body.any:
                    cands.append((m.tool_open, "reopen_tool"))  # the block so far was no call (prose naming it)
                elif self._body.between_calls:
                    cands.append((m.tool_open, "next_tool"))  # a call, then the next opener: a closer left out
        else:
            cands = [(m.think_open, "open_think"), (m.tool_open, "open_tool")]
        return [(s, k) for s, k in cands if s]

    def _step(self, out: list[TokenEvent], final: bool) -> tuple[bool, str | None]:
        if not self.buf:
            return False, None
        if self.bare_ok and self.channel == TEXT:
            s = self.buf.lstrip()
            if not s:
                if not final:
                    return False, None
            elif s[0] == "{":
                self.bare_ok = False
                self.buf = s
                self.channel, self.at_run_start = TOOL, True
                self._body = make_body(self.m, self.calls, tentative=True)
                self._block_calls = []
                return True, TOOL
            else:
                self.bare_ok = False
        markers = self._markers()
        hit = find_first(self.buf, [s for s, _ in markers])
        if hit is not None and not final and any(len(mk) > len(hit[1]) and mk.startswith(self.buf[hit[0]:])
                                                 for mk, _ in markers):
            hit = None  # a marker that may still grow into a longer one (Gemma's "```" into "```tool_code"): wait
        if hit is not None:
            i, s = hit
            kind = next(k for mk, k in markers if mk == s)
            before, self.buf = self.buf[:i], self.buf[i + len(s):]
            self._content(before, out)
            if self._reparse is not None:  # a tentative call gave up before this marker: scan it again
                self.buf, self._reparse = self._reparse + s + self.buf, None
                return True, TEXT
            if kind == "reopen_tool" and self._body is not None and self._body.any:
                # the text before this opener held a call (it came in the same piece): scan it again with the
                # markers of a block that holds a call, as it is read a token at a time (Gemma's "```tool_code"
                # then begins with its closer "```"; Qwen's "<tool_call>" is the block's text)
                self.buf = s + self.buf
                return True, TOOL
            if kind in ("close_tool", "next_tool", "reopen_tool") and self._body is not None and self._body.quoting:
                # inside a quoted argument value the marker is part of the value — unless the output ends
                # right after it (the model forgot the closing quote): wait until more text tells which
                if not self.buf.strip():
                    if not final:
                        self.buf = s + self.buf
                        return False, TOOL
                else:
                    self._content(s, out)
                    if self._reparse is not None:
                        self.buf, self._reparse = self._reparse + self.buf, None
                    return True, TOOL
            self._switch(kind, out)
            return True, REASONING if kind.endswith("think") else TOOL
        # no whole marker: keep back a tail that could begin one
        keep = 0 if final else hold_length(self.buf, [s for s, _ in markers])
        emit_now, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        ch = self._content(emit_now, out)
        if self._reparse is not None:
            self.buf, self._reparse = self._reparse + self.buf, None
            return bool(self.buf), ch
        return False, ch

    def _content(self, text: str, out: list[TokenEvent]) -> str | None:
        if not text:
            return None
        if self.channel == TOOL:
            assert self._body is not None
            body = self._body
            events = body.feed(text)
            self._track(events)
            out.extend(events)
            if body.tentative and (body.rejected is not None or body.leftover is not None):
                # not a call after all (its text goes out as text), or text after a complete call
                if body.rejected is not None:
                    out.append(TextDelta(body.rejected))
                    self.at_run_start = False
                else:  # the call is complete: the text that follows it is not part of the block
                    self._check(body, body.raw[: len(body.raw) - len(body.leftover)])
                self._reparse = body.leftover or ""
                self._body = None
                self.channel = TEXT
            return TOOL
        if self.at_run_start:
            text = text.lstrip()
            if not text:
                return self.channel
            self.at_run_start = False
        if self.channel == REASONING:
            out.append(ReasoningDelta(text))
            return REASONING
        self.bare_ok = False
        body = text.rstrip()  # trailing whitespace waits: before a marker or the end it is layout
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
        elif kind in ("open_tool", "next_tool", "reopen_tool"):
            if kind == "next_tool" and self._body is not None:
                if self.m.tool_close:
                    log.warning("a tool call block without its closer %r; the next opener ends it", self.m.tool_close)
                out.extend(self._close_body(truncated=False))
            elif kind == "reopen_tool":  # what the first opener began is text; the second begins the block
                out.extend(self._close_body(truncated=True))
                self.pending_ws = ""
            self.ws_before_tool, self.pending_ws = self.pending_ws, ""
            self.bare_ok = False
            self.channel = TOOL
            self._body = make_body(self.m, self.calls)
            self._block_calls = []
        elif kind == "close_tool":
            if self._body is None:
                out.append(TextDelta(self.m.tool_close or ""))
                return
            out.extend(self._close_body(truncated=False))
            self._body = None
            self.channel = TEXT

    def _close_body(self, truncated: bool) -> list[TokenEvent]:
        body = self._body
        events = body.close(truncated)
        self._track(events)
        if not truncated or body.tentative:  # a bare call has no closing marker: the end of the answer ends it
            self._check(body, body.raw)
        if not body.any and events and isinstance(events[0], TextDelta) and not body.tentative:
            # not a call after all: the text it interrupted keeps its layout
            events[0] = TextDelta(self.ws_before_tool + events[0].text)
            self.at_run_start = False
        return events

    def _track(self, events: list[TokenEvent]) -> None:
        self._block_calls.extend(e for e in events if isinstance(e, (ToolCallStarted, ToolCallDone)))

    def _check(self, body: Body, text: str) -> None:
        """The completed block against its format's grammar (logs a disagreement; never raises)."""
        grammar.check_block(body.format, text, grammar.streamed_calls(self._block_calls), self.calls.tools)
        self._block_calls = []
