"""Tool-call bodies whose arguments are tags (Qwen3-coder XML, GLM key/value): their JSON is built and
streamed here (see ``bodies/make.py``)."""

from __future__ import annotations

import ast
import json
import logging
from dataclasses import dataclass

from ....events import TextDelta, ToolCallDone, TokenEvent
from ....logtext import excerpt
from .base import SteppedBody
from .json_objects import JsonSpan
from ..grown import Grown
from ..markup import find_first, partial_suffix

log = logging.getLogger("tinytitan.parser")


# ---------------------------------------------------------------------------------------------------------
# Tagged arguments: Qwen3-coder XML, GLM key/value
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TagSpec:
    prefix: str  # before the name ("" for none)
    name_end: tuple[str, ...]  # what ends the name (a key opener is not consumed)
    key_open: str
    key_close: str
    value_open: str  # "" where the key's closer opens the value
    value_close: str
    end: str | None  # closes the function inside the block ("" / None: the block's own close)
    trim: str  # "newline": one newline each side is layout; "strip": all surrounding whitespace is; "none"
    unknown_is_string: bool  # a parameter the schema does not type is a string (else: JSON if it parses)
    repeat: bool = False  # several calls in one block, each opened by ``prefix`` (``<invoke …>``, ``<function=…>``)


# Qwen3-Coder may write several functions in one block: its own parser (qwen3coder_tool_parser) takes them all
XML = TagSpec("<function=", (">",), "<parameter=", ">", "", "</parameter>", "</function>", "newline", True,
              repeat=True)
# GLM's templates write a value verbatim between its tags, so a string keeps its whitespace (mlx-lm's glm47
# parser strips it); a typed value is read stripped.
KV = TagSpec("", ("\n", "<arg_key>"), "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", None, "none", False)
_STRING_TYPES = {"string", "str", "text", "varchar", "char", "enum"}


def convert_value(text: str, typ: str | None, unknown_is_string: bool):
    """A tagged value as the JSON value it stands for."""
    if typ in _STRING_TYPES or (typ is None and unknown_is_string):
        return text
    for attempt in (text, text.lower() if text in ("True", "False", "None") else None):
        if attempt is None:
            continue
        try:
            return json.loads(attempt)
        except ValueError:
            pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


class TaggedCall(SteppedBody):
    typed = Grown()  # a typed parameter's value as written so far (a number, an array, an object): read at its end

    def __init__(self, calls, markup, spec: TagSpec, tentative=False):
        super().__init__(calls, markup, tentative)
        self.spec = spec
        self.buf = ""
        self.state = "prefix" if spec.prefix else "name"
        self.name = ""
        self.args = ""
        self.nkeys = 0
        self.kind = "string"
        self.value = ""  # a string value's text not yet emitted (a typed one's is ``typed``)
        self.value_started = False
        self.junk = ""
        self.json_args = False  # the arguments came as one JSON object
        self.head_at = 0  # where in ``raw`` the block's next call began (``repeat``), its name not yet whole
        self.span: JsonSpan | None = None

    @property
    def quoting(self) -> bool:
        # a value runs to its own closing tag; JSON arguments to the end of their object
        return self.state == "value" or (self.state == "json" and self.span.in_string)

    @property
    def between_calls(self) -> bool:
        """Key/value calls (GLM) have no end marker of their own: between two arguments, with only whitespace
        held, the call is complete, and the family's opener there begins the next block (the closer left out)."""
        if self.spec.end is None and self.any and self.state == "keys" and not self.buf.strip():
            return True
        return super().between_calls

    def _expect(self, *markers: str) -> str | None | bool:
        """At buf's start (after whitespace): the marker found (consumed), False to wait, None on a mismatch."""
        s = self.buf.lstrip()
        for mk in markers:
            if mk and s.startswith(mk):
                self.buf = s[len(mk):]
                return mk
        if not s or any(mk and mk.startswith(s) for mk in markers):
            self.buf = s
            return False
        return None

    def _step(self, out: list) -> bool:
        sp, st = self.spec, self.state
        if st == "prefix":
            got = self._expect(sp.prefix)
            if got is None:
                self.state = "junk"
                return True
            if got:
                self.state = "name"
            return bool(got)
        if st == "name":
            self.buf = self.buf.lstrip()
            if not self.buf:
                return False
            hit = find_first(self.buf, sp.name_end)
            if hit is None:
                if len(self.buf) > 200:
                    self.state = "junk"
                    return True
                return False
            i, mk = hit
            name = self.buf[:i].strip()
            self.buf = self.buf[i + (0 if mk == sp.key_open else len(mk)):]
            if not name or any(c.isspace() or c in "<>{}" for c in name):
                self.state = "junk"
                return True
            self.name = name
            self._start(name, out)
            self.state = "keys"
            return True
        if st == "keys":
            s = self.buf.lstrip()
            if s.startswith("{") and self.nkeys == 0 and not self.json_args:
                # some models write the arguments as a JSON object inside the function instead of as tags
                self.buf, self.state, self.json_args, self.span = s, "json", True, JsonSpan()
                return True
            got = self._expect(sp.key_open, sp.end or "")
            if got is None:
                self.state = "junk"
                return True
            if not got:
                return False
            if got == sp.key_open:
                self.state, self.buf = "key", self.buf
                return True
            self._finish_call(out)  # the function's own end marker
            self.state = "after"
            return True
        if st == "json":
            n = self.span.feed(self.buf)
            piece, self.buf = self.buf[:n], self.buf[n:]
            if piece:
                self._emit(out, piece)
            if self.span.done:
                self.state = "keys"
                return True
            return False
        if st == "key":
            i = self.buf.find(sp.key_close)
            if i < 0:
                return False
            key, self.buf = self.buf[:i].strip(), self.buf[i + len(sp.key_close):]
            typ = self.calls.param_type(self.name, key)
            self.kind = "string" if (typ in _STRING_TYPES or (typ is None and sp.unknown_is_string)) else "typed"
            self.typ = typ
            self._emit(out, ("{" if self.nkeys == 0 else ", ") + json.dumps(key, ensure_ascii=False) + ": "
                       + ('"' if self.kind == "string" else ""))
            self.nkeys += 1
            self.value, self.typed, self.value_started = "", "", False
            self.state = "pre_value" if sp.value_open else "value"
            return True
        if st == "pre_value":
            got = self._expect(sp.value_open)
            if got is None:  # a key without its value: an empty string
                self.state = "value"
                return True
            if got:
                self.state = "value"
            return bool(got)
        if st == "value":
            i = self.buf.find(sp.value_close)
            if i >= 0:
                chunk, self.buf = self.buf[:i], self.buf[i + len(sp.value_close):]
            else:
                keep = partial_suffix(self.buf, sp.value_close)
                chunk, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
            self._value(chunk, out, final=i >= 0)
            if i >= 0:
                self.state = "keys"
                return True
            return False
        if st == "after":
            if sp.repeat:
                s = self.buf.lstrip()
                if s.startswith(sp.prefix):  # the next call of the block
                    self.buf, self.state, self.name, self.args, self.nkeys, self.json_args = s, "prefix", "", "", 0, False
                    self.head_at = len(self.raw) - len(s)
                    return True
                if not s or sp.prefix.startswith(s):  # (whitespace kept: text may follow)
                    return False
                i = self.buf.find(sp.prefix)  # text, up to the next call of the block (in the same piece)
                keep = len(self.buf) - i if i >= 0 else partial_suffix(self.buf, sp.prefix)
                self._text_after_call(self.buf[:len(self.buf) - keep], out)
                self.buf = self.buf[len(self.buf) - keep:]
                return i >= 0
            self._text_after_call(self.buf, out)
            self.buf = ""
            return False
        if st == "junk":
            self.junk += self.buf
            self.buf = ""
            return False
        return False

    def _value(self, chunk: str, out: list, final: bool) -> None:
        trim = self.spec.trim
        if not self.value_started:
            if trim == "strip":
                chunk = chunk.lstrip()
                if not chunk and not final:
                    return
            elif trim == "newline":
                if not chunk and not final:
                    return
                if chunk.startswith("\n"):
                    chunk = chunk[1:]
            self.value_started = True
        if self.kind != "string":
            TaggedCall.typed.grow(self, chunk)
            if final:
                typed = self.typed
                text = _trim_newline(typed) if trim == "newline" else typed.strip()
                value = convert_value(text, self.typ, self.spec.unknown_is_string)
                self._emit(out, json.dumps(value, ensure_ascii=False))
            return
        self.value += chunk  # (held whitespace and this chunk: a few characters)
        if final:
            text = {"strip": str.rstrip, "newline": _trim_newline}.get(trim, str)(self.value)
            self._emit(out, _escape(text) + '"')
            self.value = ""
            return
        if trim == "strip":
            held = len(self.value) - len(self.value.rstrip())
        elif trim == "newline":
            held = 1 if self.value.endswith("\n") else 0
        else:
            held = 0
        send, self.value = self.value[: len(self.value) - held], self.value[len(self.value) - held:]
        if send:
            self._emit(out, _escape(send))

    def _finish_call(self, out: list) -> None:
        if not self.json_args:
            self._emit(out, "}" if self.nkeys else "{}")
        out.append(ToolCallDone(self.index, self.args))

    def close(self, truncated: bool) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        st = self.state
        if not self.any:
            if st == "name" and self.buf.strip() and self.spec.prefix == "" and not truncated:
                name = self.buf.strip()  # a call with no arguments: just the name
                if not any(c.isspace() or c in "<>{}" for c in name):
                    self._start(name, out)
                    self._finish_call(out)
                    return out
            if not self.raw.strip():
                return [] if self.tentative else self._as_text(truncated)
            return self._as_text(truncated)
        if st == "after" and self.buf.strip():  # what might have begun another call: text after all
            self._text_after_call(self.buf, out)
        if st in ("after", "done"):
            return out
        if not self.name:  # after a complete call, the next one's head unfinished or not understood: no call
            rest = self.raw[self.head_at:].strip()  # (the cap's cut head is dropped by the scanner)
            if rest:
                log.warning("unfinished text after a tool call; returned as text: %s", excerpt(log, rest))
                out.append(TextDelta(rest))
            return out
        if st != "keys" or self.spec.end:
            log.warning("tool call %s: markup cut short or not understood (in %s)", self.index, st)
        if st == "value":
            self._value(self.buf, out, final=True)
            self.buf = ""
        elif st == "json" and self.buf:
            self._emit(out, self.buf)
            self.buf = ""
        elif st == "pre_value":
            self._emit(out, '"' if self.kind == "string" else "null")
        self._finish_call(out)
        if self.junk.strip():
            out.append(TextDelta(self.junk.strip()))
        self.state = "done"
        return out


def _trim_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def _escape(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]
