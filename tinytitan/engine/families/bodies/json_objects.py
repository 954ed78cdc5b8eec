"""Tool-call bodies written as JSON objects (Qwen-style ``<tool_call>{...}</tool_call>``, Llama 3, …), and
the string-state helpers other bodies share (see ``bodies/make.py``)."""

from __future__ import annotations

import json
import logging

import regex

from ....events import TextDelta, ToolCallArgsDelta, ToolCallDone, TokenEvent
from ....logtext import excerpt
from .base import Body, SteppedBody

log = logging.getLogger("tinytitan.parser")


# ---------------------------------------------------------------------------------------------------------
# JSON values, incrementally
# ---------------------------------------------------------------------------------------------------------

class JsonSpan:
    """Finds where one JSON value ends in a stream of text (it does not validate it)."""

    def __init__(self):
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.started = False
        self.scalar = False
        self.done = False
        self.string_value = False

    def feed(self, text: str) -> int:
        """Consume text; returns how many characters belong to the value (the rest follows it)."""
        for i, c in enumerate(text):
            if self.done:
                return i
            if not self.started:
                if c.isspace():
                    continue
                self.started = True
                if c in "{[":
                    self.depth = 1
                elif c == '"':
                    self.in_string = True
                    self.string_value = True
                else:
                    self.scalar = True
                continue
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif c == "\\":
                    self.escape = True
                elif c == '"':
                    self.in_string = False
                    if self.string_value:
                        self.done = True
                continue
            if self.scalar:
                if c in ",}]" or c.isspace():
                    self.done = True
                    return i
                continue
            if c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return i + 1
        return len(text)


_HEAD = regex.compile(
    r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)'
)
_SEPARATORS = " \t\r\n,;[]"


def _call_objects(value) -> list[tuple[str, str]] | None:
    """Calls from a whole JSON document (any key order), or None."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for obj in items:
        if not isinstance(obj, dict):
            return None
        if isinstance(obj.get("function"), dict):
            obj = obj["function"]
        name = obj.get("name")
        args = obj.get("arguments", obj.get("parameters", {}))
        if not isinstance(name, str) or not name.strip():  # a call no client could dispatch
            return None
        if isinstance(args, str):
            try:
                json.loads(args)
            except ValueError:
                args = json.dumps(args)
            calls.append((name, args))
        else:
            calls.append((name, json.dumps(args, ensure_ascii=False)))
    return calls or None


class JsonCalls(SteppedBody):
    """``{"name": …, "arguments": …}`` objects: one, several (``;``/``,``/newline separated), or a list."""

    def __init__(self, calls, markup, tentative=False):
        super().__init__(calls, markup, tentative)
        self.state = "between"
        self.buf = ""
        self.span: JsonSpan | None = None
        self.args = ""
        self.rest: JsonSpan | None = None  # the rest of the call object, after its arguments
        self.tail = ""
        self.quoted_from = 0  # where the JSON a closing marker may stand inside starts (after text: its next call)

    @property
    def quoting(self) -> bool:
        return self.state != "text" and json_in_string(self.raw[self.quoted_from:])

    def _step(self, out: list) -> bool:
        st = self.state
        if st == "between":
            s = self.buf.lstrip(_SEPARATORS)
            self.buf = s
            if not s:
                return False
            if s[0] == "{":
                self.state = "head"
                return True
            return self._junk(out)
        if st == "head":
            m = _HEAD.match(self.buf, partial=True)
            if m is not None and m.partial:
                return False
            if m is None:
                if self.tentative and not self.any:
                    self.rejected, self.buf, self.state = self.raw, "", "done"
                    return False
                self.state = "raw"  # maybe another key order: decided at the close
                return False
            try:
                name = json.loads('"' + m.group(1) + '"')
            except ValueError:
                name = m.group(1)
            if not name.strip():  # no name: not a call (decided at the close, like another key order)
                self.state = "raw"
                return False
            if self.tentative and not self.any and self.calls.tools and name not in self.calls.tools:
                # a bare JSON answer naming no offered tool is a document (a function definition…), not a call
                self.rejected, self.buf, self.state = self.raw, "", "done"
                return False
            self.buf = self.buf[m.end():]
            self._start(name, out)
            self.span, self.args, self.state = JsonSpan(), "", "args"
            return True
        if st == "args":
            n = self.span.feed(self.buf)
            piece, self.buf = self.buf[:n], self.buf[n:]
            Body.args.grow(self, piece)
            if piece and not self.span.string_value:
                out.append(ToolCallArgsDelta(self.index, piece))
            if self.span.done:
                if self.span.string_value:  # arguments written as a JSON string holding JSON
                    self.args = _unstring(self.args)
                    out.append(ToolCallArgsDelta(self.index, self.args))
                self.state, self.rest, self.tail = "tail", JsonSpan(), ""
                self.rest.feed("{")  # a span opened at the object's "{": it ends at the matching "}"
                return True
            return False
        if st == "tail":  # the rest of the call object (an "id" key, or just "}")
            n = self.rest.feed(self.buf)
            if self.rest.done:
                self.buf = self.buf[n:]
                out.append(ToolCallDone(self.index, self.args))
                self.state = "between"
                return True
            self.tail += self.buf  # kept: a model that never closes the object wrote text here
            self.buf = ""
            return False
        if st == "text":  # text after a call, up to a call object that follows it
            i = self.buf.find("{")
            while i >= 0 and _HEAD.match(self.buf, i, partial=True) is None:
                i = self.buf.find("{", i + 1)
            self._text_after_call(self.buf[:i] if i >= 0 else self.buf, out)
            self.buf = self.buf[i:] if i >= 0 else ""
            if not self.buf or _HEAD.match(self.buf, partial=True).partial:
                return False
            self.state, self.quoted_from = "head", len(self.raw) - len(self.buf)
            return True
        return False  # raw / done: wait for the close

    def _junk(self, out: list) -> bool:
        if self.tentative:
            if self.any:
                self.leftover, self.buf, self.state = self.buf, "", "done"
            else:
                self.rejected, self.buf, self.state = self.raw, "", "done"
            return False
        if not self.any:
            self.state = "raw"
            return False
        self.state = "text"  # the rest of the block is that text, separators and all, up to a call object
        return True

    def close(self, truncated: bool) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        st = self.state
        if st == "done":
            return out
        if st == "text" and self.buf:  # the start of what might have been a call object: text after all
            self._text_after_call(self.buf, out)
        if st in ("head", "raw", "between") and self.buf.strip():
            if not self.any:
                try:
                    calls = _call_objects(json.loads(self.buf))
                except ValueError:
                    calls = None
                if calls is None:
                    return self._as_text(truncated)
                for name, args in calls:
                    self._start(name, out)
                    out += [ToolCallArgsDelta(self.index, args), ToolCallDone(self.index, args)]
                return out
            log.warning("unfinished text after a tool call; returned as text: %s", excerpt(log, self.buf))
            return [TextDelta(self.buf)]
        if st == "args":
            log.warning("tool call %s: arguments cut short", self.index)
            if self.span.string_value:
                self.args = _unstring(self.args + '"')
                out.append(ToolCallArgsDelta(self.index, self.args))
            out.append(ToolCallDone(self.index, self.args, complete=False))
        elif st == "tail":
            out.append(ToolCallDone(self.index, self.args))
            # what the unclosed object went on with: text, unless the cap cut it or it is more of the object
            text = "" if truncated else self.tail.strip().removesuffix("}").strip()
            if text and not text.startswith(","):
                log.warning("text inside an unclosed tool call object; returned as text: %s", excerpt(log, text))
                out.append(TextDelta(text))
        self.state = "done"
        return out


def json_in_string(text: str) -> bool:
    """Whether JSON text stops inside a string literal (only its quotes and escapes are read)."""
    inside = escape = False
    for c in text:
        if escape:
            escape = False
        elif inside and c == "\\":
            escape = True
        elif c == '"':
            inside = not inside
    return inside


def py_in_string(text: str) -> bool:
    """Whether Python source stops inside a string literal ('…', "…", triple-quoted; backslash escapes)."""
    quote, i = None, 0
    while i < len(text):
        if quote is None:
            if text[i] in "'\"":
                quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
                i += len(quote)
                continue
        elif text[i] == "\\":
            i += 2
            continue
        elif text.startswith(quote, i):
            i += len(quote)
            quote = None
            continue
        i += 1
    return quote is not None


def _unstring(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return value
