"""The streaming parser for gpt-oss's harmony format.

A harmony answer is a sequence of messages, each a header and a body:
``<|channel|>analysis<|message|>…<|end|>`` (reasoning),
``<|start|>assistant<|channel|>final<|message|>…<|return|>`` (the answer),
``<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}<|call|>`` (a tool
call; the recipient may also stand before ``<|channel|>``), and ``commentary`` without a recipient (a
preamble the user sees: text). The generation prompt ends with ``<|start|>assistant``, so the answer opens
with a header.

Rules: the header is read whole (it is a few tokens) — the channel decides where the body goes; a tool
call's name is its recipient without the ``functions.`` prefix, reported when the header ends, and the body
streams as the arguments. ``<|call|>`` and ``<|return|>`` end the turn (the decoder stops on them, so the last
message may simply end). A header that never ends, or text outside any message, comes back as text (logged).
When a tool-call message ends, its header and body are checked once against ``grammars/harmony.lark``
(``grammar.check_block``): a disagreement is logged, never raised, and changes no event.
"""

from __future__ import annotations

import logging
import re

from ...events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallDone, TokenEvent
from ...logtext import excerpt
from . import grammar
from .grown import Grown
from .bodies.make import Calls
from .markup import REASONING, TEXT, TOOL, find_first, hold_length

log = logging.getLogger("tinytitan.parser")

START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN = (
    "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>")
BODY_ENDS = (END, CALL, RETURN, START, CHANNEL)
HEADER_LIMIT = 256
_CHANNEL = re.compile(r"<\|channel\|>\s*([\w-]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


class HarmonyParser:
    args = Grown()  # the current call's arguments as streamed

    def __init__(self, start_in_reasoning: bool = False, namespaces: dict[str, str] | None = None,
                 tools: dict[str, dict] | None = None, continues: bool = False, calls: bool = True):
        self.calls = Calls(namespaces, tools)
        self.calls_allowed = calls  # False: a message to a function is the model's text, never a call
        self.buf = ""
        # a prefill leaves the model inside its final message's text: a body, whitespace and all
        self.mode = "body" if start_in_reasoning or continues else "header"
        self.channel = REASONING if start_in_reasoning else TEXT
        self.header = ""
        self.at_run_start = not continues
        self.pending_ws = ""
        self.index: int | None = None
        self.args = ""
        self.call_header = ""  # the header of the tool-call message being read (for the grammar check)
        self.call_name = ""

    @property
    def tool_calls(self) -> int:
        return self.calls.count

    def feed(self, piece: str) -> tuple[list[TokenEvent], str]:
        out: list[TokenEvent] = []
        self.buf += piece
        touched = self.channel
        while self._step(out, final=False):
            pass
        if self.mode == "body":
            touched = self.channel
        else:  # a header token belongs to the channel its header opens, as far as it is known yet
            header = self.header + self.buf
            touched = (TOOL if "to=" in header else REASONING if "analysis" in header
                       else TEXT if ("final" in header or "commentary" in header) else touched)
        return out, touched

    def finish(self, cut: bool = False) -> list[TokenEvent]:
        """End of generation (``cut``: by the output cap). A header cut short is dropped either way."""
        out: list[TokenEvent] = []
        if self.mode == "header" and any(t in self.header + self.buf for t in (START, CHANNEL, CONSTRAIN)):
            # a header cut short by the output cap: markup, not content
            log.info("harmony header cut short: %s", excerpt(log, self.header + self.buf))
            self.header = self.buf = ""
        while self._step(out, final=True):
            pass
        if self.mode == "header" and (self.header + self.buf).strip():
            self._bad_header(out)
        self._end_message(out)
        return out

    # -- internals -----------------------------------------------------------------------------------------
    def _step(self, out: list[TokenEvent], final: bool) -> bool:
        if not self.buf:
            return False
        if self.mode == "header":
            i = self.buf.find(MESSAGE)
            if i < 0:
                if len(self.header) + len(self.buf) > HEADER_LIMIT or (final and self.buf.strip()):
                    self.header += self.buf
                    self.buf = ""
                    self._bad_header(out)
                    return bool(self.buf)
                return False
            self.header += self.buf[:i]
            self.buf = self.buf[i + len(MESSAGE):]
            self._open_message(out)
            return True
        hit = find_first(self.buf, BODY_ENDS)
        if hit is not None:
            i, mk = hit
            self._content(self.buf[:i], out)
            self._end_message(out)
            self.buf = self.buf[i + (0 if mk in (START, CHANNEL) else len(mk)):]
            self.mode, self.header = "header", ""
            return True
        keep = 0 if final else hold_length(self.buf, BODY_ENDS)
        if self.channel == TOOL and not final:  # trailing whitespace of arguments is held: it may be the end
            keep = max(keep, len(self.buf) - len(self.buf.rstrip()))
        now, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        self._content(now, out)
        return False

    def _open_message(self, out: list[TokenEvent]) -> None:
        header = self.header
        m = _CHANNEL.search(header)
        channel = m.group(1) if m else "final"
        r = _RECIPIENT.search(header)
        self.mode, self.at_run_start, self.pending_ws = "body", True, ""
        to_function = r is not None and not r.group(1).startswith(("assistant", "user"))
        if to_function and not self.calls_allowed:
            log.warning("harmony message to %s, but the request allows no calls; returned as text", r.group(1))
            self.channel = TEXT
        elif to_function:
            name = r.group(1)
            name = name[len("functions."):] if name.startswith("functions.") else name
            ev = self.calls.start(name)
            self.index, self.args = ev.index, ""
            self.call_header, self.call_name = header, name
            out.append(ev)
            self.channel = TOOL
        elif channel == "analysis":
            self.channel = REASONING
        else:
            self.channel = TEXT  # final, or a commentary preamble

    def _end_message(self, out: list[TokenEvent]) -> None:
        if self.mode == "body" and self.channel == TOOL and self.index is not None:
            out.append(ToolCallDone(self.index, self.args))
            self.index = None
            grammar.check_block("harmony", self.call_header + MESSAGE + self.args, [(self.call_name, self.args)],
                                self.calls.tools)
        self.pending_ws = ""

    def _bad_header(self, out: list[TokenEvent]) -> None:
        text = self.header
        self.header = ""
        log.warning("harmony header not understood; returned as text: %s", excerpt(log, text))
        self.mode, self.channel, self.at_run_start = "body", TEXT, True
        stripped = re.sub(r"^\s*(<\|start\|>)?\s*assistant\s*", "", text) if not _CHANNEL.search(text) else text
        self._content(stripped, out)

    def _content(self, text: str, out: list[TokenEvent]) -> None:
        if not text:
            return
        if self.at_run_start:
            text = text.lstrip()
            if not text:
                return
            self.at_run_start = False
        if self.channel == TOOL:
            HarmonyParser.args.grow(self, text)
            out.append(ToolCallArgsDelta(self.index, text))
        elif self.channel == REASONING:
            out.append(ReasoningDelta(text))
        elif text.strip():
            out.append(TextDelta(self.pending_ws + text))
            self.pending_ws = ""
        else:
            self.pending_ws += text
