"""Streaming decoders for the inside of a tool call, one per way families write it.

Each decoder is fed the text between the call's markers as it arrives and returns TokenEvents:
``ToolCallStarted`` as soon as the name is known, ``ToolCallArgsDelta`` pieces whose concatenation is exactly
the ``ToolCallDone.arguments`` JSON, and ``ToolCallDone`` as soon as the call is complete (often before the
closing marker). Formats that write arguments as tags (Qwen3-coder XML, GLM key/value) get their JSON
built and streamed here: a string value streams as it is written; any other value is converted when it
ends, typed by the tool's JSON schema where the request has one.

Nothing here raises on bad markup: a body never understood comes back as text (markers included), what
follows a complete call comes back as text, and a call cut short is closed with what it has — all logged.

The formats are defined by the Lark grammars in ``grammars/`` (one per call syntax; ``grammar.py`` loads
them), and the grammar checks every completed call block: the parser hands each block (``raw``, as collected
here) to ``grammar.check_block``, which compares the grammar's calls with what was streamed and logs a
disagreement — never failing the request, never changing events a client already has. These decoders exist
because Lark (like mlx-lm's ``tool_parsers``) only parses finished text: it needs whole terminals, and a
streamed value has no end until its closing tag arrives, so it could not report a call's name while its
arguments are still being generated, nor stream them as deltas. The markers are data (``markup.Markup``
plus the tag table below); the tests check the decoders against the grammars on every scripted block and
against mlx-lm's parsers on the same blocks.
"""

from __future__ import annotations

import ast
import json
import logging
from dataclasses import dataclass

import regex

from ...events import TextDelta, ToolCallArgsDelta, ToolCallDone, ToolCallStarted, TokenEvent
from .markup import Markup, find_first, new_call_id, partial_suffix

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

    def __init__(self, calls: Calls, markup: Markup, tentative: bool = False):
        self.calls = calls
        self.m = markup
        self.tentative = tentative  # no opening marker: give up at the first sign it is not a call
        self.raw = ""
        self.rejected: str | None = None
        self.leftover: str | None = None
        self.index: int | None = None
        self.any = False  # some call started
        self.warned = False  # logged once per block
        self.format = markup.body  # the grammar that checks the completed block (set by make_body)

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

    # helpers
    def _start(self, name: str, out: list) -> None:
        ev = self.calls.start(name)
        self.index = ev.index
        self.any = True
        out.append(ev)

    def _as_text(self, truncated: bool) -> list[TokenEvent]:
        log.warning("tool-call markup not understood; returned as text: %r", self.raw[:200])
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
            self.args += text
            out.append(ToolCallArgsDelta(self.index, text))

    def feed(self, text: str) -> list[TokenEvent]:
        self.raw += text
        self.buf += text
        out: list[TokenEvent] = []
        while self.buf and self._step(out):
            pass
        return out

    def _step(self, out: list) -> bool:
        raise NotImplementedError


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

    @property
    def quoting(self) -> bool:
        return json_in_string(self.raw)

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
            self.buf = self.buf[m.end():]
            self._start(name, out)
            self.span, self.args, self.state = JsonSpan(), "", "args"
            return True
        if st == "args":
            n = self.span.feed(self.buf)
            piece, self.buf = self.buf[:n], self.buf[n:]
            self.args += piece
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
        if not self.warned:
            log.warning("text after a tool call inside its markup; returned as text: %r", self.buf[:200])
            self.warned = True
        out.append(TextDelta(self.buf))
        self.buf = ""
        return False

    def close(self, truncated: bool) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        st = self.state
        if st == "done":
            return out
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
            log.warning("unfinished text after a tool call; returned as text: %r", self.buf[:200])
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
                log.warning("text inside an unclosed tool call object; returned as text: %r", text[:200])
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


XML = TagSpec("<function=", (">",), "<parameter=", ">", "", "</parameter>", "</function>", "newline", True)
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
    def __init__(self, calls, markup, spec: TagSpec, tentative=False):
        super().__init__(calls, markup, tentative)
        self.spec = spec
        self.buf = ""
        self.state = "prefix" if spec.prefix else "name"
        self.name = ""
        self.args = ""
        self.nkeys = 0
        self.kind = "string"
        self.value = ""  # value text not yet emitted (string) or all of it (typed)
        self.value_started = False
        self.junk = ""
        self.json_args = False  # the arguments came as one JSON object
        self.span: JsonSpan | None = None

    @property
    def quoting(self) -> bool:
        # a value runs to its own closing tag; JSON arguments to the end of their object
        return self.state == "value" or (self.state == "json" and self.span.in_string)

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
            self.value, self.value_started = "", False
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
            if self.buf.strip():
                if not self.warned:
                    log.warning("text after a tool call inside its markup; returned as text: %r", self.buf[:200])
                    self.warned = True
                out.append(TextDelta(self.buf.strip()))
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
        self.value += chunk
        if self.kind != "string":
            if final:
                text = _trim_newline(self.value) if trim == "newline" else self.value.strip()
                value = convert_value(text, self.typ, self.spec.unknown_is_string)
                self._emit(out, json.dumps(value, ensure_ascii=False))
            return
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
        if st in ("after", "done"):
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


# ---------------------------------------------------------------------------------------------------------
# Mistral: NAME[ARGS]{json}, or a JSON list
# ---------------------------------------------------------------------------------------------------------

class MistralCall(Body):
    ARGS = "[ARGS]"
    CALL_ID = "[CALL_ID]"

    def __init__(self, calls, markup, tentative=False):
        super().__init__(calls, markup, tentative)
        self.json: JsonCalls | None = None
        self.buf = ""
        self.state = "start"
        self.args = ""
        self.span: JsonSpan | None = None

    @property
    def quoting(self) -> bool:
        if self.json is not None:
            return self.json.quoting
        return self.state == "args" and self.span.in_string

    def feed(self, text: str) -> list[TokenEvent]:
        self.raw += text
        if self.json is not None:
            return self.json.feed(text)
        self.buf += text
        out: list[TokenEvent] = []
        if self.state == "start":
            s = self.buf.lstrip()
            if not s:
                return out
            if s[0] in "[{":
                self.json = JsonCalls(self.calls, self.m)
                self.json.raw = ""
                out = self.json.feed(s)
                self.any = self.json.any
                return out
            self.state, self.buf = "name", s
        if self.state == "name":
            i = self.buf.find(self.ARGS)
            if i < 0:
                if len(self.buf) > 200:
                    self.state = "junk"
                return out
            name, self.buf = self.buf[:i], self.buf[i + len(self.ARGS):]
            name = name.split(self.CALL_ID)[0].strip()
            if not name or any(c.isspace() or c in "<>{}[]" for c in name):
                self.state = "junk"
                return out
            self._start(name, out)
            self.state, self.span = "args", JsonSpan()
        if self.state == "args":
            n = self.span.feed(self.buf)
            piece, self.buf = self.buf[:n], self.buf[n:]
            if piece:
                self.args += piece
                out.append(ToolCallArgsDelta(self.index, piece))
            if self.span.done:
                out.append(ToolCallDone(self.index, self.args))
                self.state = "after"
        if self.state == "after":
            if self.buf.strip():
                if not self.warned:
                    log.warning("text after a Mistral tool call; returned as text: %r", self.buf[:200])
                    self.warned = True
                out.append(TextDelta(self.buf.strip()))
            self.buf = ""
        return out

    def close(self, truncated: bool) -> list[TokenEvent]:
        if self.json is not None:
            self.json.raw = self.raw
            return self.json.close(truncated)
        if self.state == "args":
            log.warning("tool call %s: arguments cut short", self.index)
            return [ToolCallDone(self.index, self.args, complete=False)]
        if self.state in ("start", "name", "junk") and self.raw.strip():
            return self._as_text(truncated=True)
        return []


# ---------------------------------------------------------------------------------------------------------
# Pythonic calls: NAME(k="v", n=2) in Gemma's ```tool_code fences
# ---------------------------------------------------------------------------------------------------------

_PY_NAME = regex.compile(r"\s*([A-Za-z_][\w.]*)\s*\(")


class _JSONLiterals(ast.NodeTransformer):
    VALUES = {"true": True, "false": False, "null": None}

    def visit_Name(self, node):
        if node.id in self.VALUES:
            return ast.copy_location(ast.Constant(self.VALUES[node.id]), node)
        return node


class PythonicCall(Body):
    def __init__(self, calls, markup, tentative=False):
        super().__init__(calls, markup, tentative)
        self.buf = ""
        self.state = "name"
        self.name = ""

    @property
    def quoting(self) -> bool:
        return self.state == "args" and py_in_string(self.buf)

    def feed(self, text: str) -> list[TokenEvent]:
        self.raw += text
        self.buf += text
        out: list[TokenEvent] = []
        if self.state == "name":
            m = _PY_NAME.match(self.buf, partial=True)
            if m is None:
                self.state = "junk"
            elif not m.partial:
                self.name = m.group(1)
                self.buf = self.buf[m.end():]
                self._start(self.name, out)
                self.state = "args"
        return out

    def close(self, truncated: bool) -> list[TokenEvent]:
        if not self.any:
            return self._as_text(truncated) if self.raw.strip() else []
        # the block may hold more calls, one per line: name(...)\nother(...)
        try:
            stmts = ast.parse(f"{self.name}({self.buf.strip()}").body
            calls = [_py_call(st) for st in stmts]
        except (SyntaxError, ValueError, TypeError):
            calls = None
        if not calls:
            try:
                calls = [(self.name, _py_kwargs(ast.parse(f"f({self.buf.strip().removesuffix(')')})",
                                                          mode="eval").body))]
            except (SyntaxError, ValueError, TypeError) as exc:
                log.warning("tool call %s (%s): arguments not understood (%s): %r", self.index, self.name, exc,
                            self.buf[:200])
                calls = [(self.name, "{}")]
        out: list[TokenEvent] = []
        for k, (name, args) in enumerate(calls):
            if k:
                self._start(name, out)
            out += [ToolCallArgsDelta(self.index, args), ToolCallDone(self.index, args)]
        return out


def _py_kwargs(node) -> str:
    if not isinstance(node, ast.Call) or node.args:
        raise ValueError("not a call with keyword arguments")
    value = {k.arg: ast.literal_eval(_JSONLiterals().visit(k.value)) for k in node.keywords}
    if None in value:
        raise ValueError("**kwargs")
    return json.dumps(value, ensure_ascii=False)


def _py_call(stmt) -> tuple[str, str]:
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        raise ValueError("not a call")
    func = stmt.value.func
    name = ast.unparse(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
    if not name:
        raise ValueError("not a named call")
    return name, _py_kwargs(stmt.value)


# ---------------------------------------------------------------------------------------------------------
# Gemma 4 / FunctionGemma: call:NAME{key:<|"|>text<|"|>,n:2}
# ---------------------------------------------------------------------------------------------------------

_CALL_HEAD = regex.compile(r"\s*call:([\w.-]+)\{")


class GemmaCall(SteppedBody):
    """``call:NAME{…}`` with bare keys and strings between a delimiter token (``<|"|>`` for Gemma 4,
    ``<escape>`` for FunctionGemma); the arguments stream as the JSON they stand for."""

    def __init__(self, calls, markup, delim: str, tentative=False):
        super().__init__(calls, markup, tentative)
        self.delim = delim
        self.buf = ""
        self.state = "head"
        self.stack: list[str] = []
        self.expect_key = False
        self.token = ""  # a bare key or scalar being read
        self.string_is_key = False
        self.args = ""

    @property
    def quoting(self) -> bool:
        return self.state == "string"

    def _step(self, out: list) -> bool:
        if self.state == "head":
            m = _CALL_HEAD.match(self.buf, partial=True)
            if m is None:
                if self.buf.strip():
                    self.state = "junk"
                    return True
                self.buf = ""
                return False
            if m.partial:
                return False
            self.buf = self.buf[m.end():]
            self._start(m.group(1), out)
            self.args, self.stack, self.expect_key, self.state = "", ["{"], True, "body"
            self._emit(out, "{")
            return True
        if self.state == "string":
            i = self.buf.find(self.delim)
            if i < 0:
                keep = partial_suffix(self.buf, self.delim)
                chunk, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
                self._emit(out, _escape(chunk))
                return False
            self._emit(out, _escape(self.buf[:i]) + '"')
            self.buf = self.buf[i + len(self.delim):]
            self.state = "body"
            if self.string_is_key:
                self.token = ""
            return True
        if self.state == "junk":
            self.buf = ""
            return False
        # body: one structural step
        if self.delim.startswith(self.buf):
            return False  # maybe the start of a string delimiter
        if self.buf.startswith(self.delim):
            self.buf = self.buf[len(self.delim):]
            self.string_is_key = self.expect_key
            self._emit(out, '"')
            self.state = "string"
            return True
        c = self.buf[0]
        if c in ",}]:" or (c in "{[" and not self.token):
            self.buf = self.buf[1:]
            if self.expect_key and c == ":":
                self._emit(out, json.dumps(self.token.strip(), ensure_ascii=False) + ":" if self.token.strip()
                           else ":")
                self.token, self.expect_key = "", False
                return True
            self._flush_scalar(out)
            if c in "{[":
                self.stack.append(c)
                self.expect_key = c == "{"
                self._emit(out, c)
            elif c == ",":
                self._emit(out, ",")
                self.expect_key = bool(self.stack) and self.stack[-1] == "{"
            elif c in "}]":
                if self.stack:
                    self.stack.pop()
                self._emit(out, c)
                self.expect_key = False
                if not self.stack:
                    out.append(ToolCallDone(self.index, self.args))
                    self.state = "head"
            return True
        if c.isspace() and not self.token:
            self.buf = self.buf[1:]
            return True
        self.token += c
        self.buf = self.buf[1:]
        return True

    def _flush_scalar(self, out: list) -> None:
        tok, self.token = self.token.strip(), ""
        if not tok:
            return
        try:
            json.loads(tok)
            self._emit(out, tok)
        except ValueError:
            self._emit(out, json.dumps(tok, ensure_ascii=False))

    def close(self, truncated: bool) -> list[TokenEvent]:
        if not self.any:
            return self._as_text(truncated) if self.raw.strip() else []
        out: list[TokenEvent] = []
        if self.state in ("body", "string"):
            log.warning("tool call %s: arguments cut short", self.index)
            out.append(ToolCallDone(self.index, self.args, complete=False))
        self.state = "done"
        return out


def make_body(markup: Markup, calls: Calls, tentative: bool = False) -> Body:
    """The decoder for a family's call body; its ``format`` names the grammar that checks the block."""
    kind = "json" if tentative else markup.body  # a bare answer is only ever tried as JSON
    if kind == "json":
        body = JsonCalls(calls, markup, tentative)
    elif kind == "xml":
        body = TaggedCall(calls, markup, XML, tentative)
    elif kind == "kv":
        body = TaggedCall(calls, markup, KV, tentative)
    elif kind == "mistral":
        body = MistralCall(calls, markup, tentative)
    elif kind == "pythonic":
        body = PythonicCall(calls, markup, tentative)
    elif kind == "gemma4":
        body = GemmaCall(calls, markup, '<|"|>', tentative)
    elif kind == "function_gemma":
        body = GemmaCall(calls, markup, "<escape>", tentative)
    else:
        raise ValueError(f"unknown tool-call body format {kind!r}")
    body.format = kind
    return body
