"""Tool-call bodies written as calls: Mistral's name + JSON, pythonic ``name(k=v)``, Gemma's ``call:name{...}``
(see ``bodies/make.py``)."""

from __future__ import annotations

import ast
import json
import logging

import regex

from ....events import ToolCallArgsDelta, ToolCallDone, TokenEvent
from ....logtext import excerpt
from .base import Body, SteppedBody
from .json_objects import JsonCalls, JsonSpan, py_in_string
from .tagged import _escape
from ..grown import Grown
from ..markup import partial_suffix

log = logging.getLogger("tinytitan.parser")


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
        Body.raw.grow(self, text)
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
                Body.args.grow(self, piece)
                out.append(ToolCallArgsDelta(self.index, piece))
            if self.span.done:
                out.append(ToolCallDone(self.index, self.args))
                self.state = "after"
        if self.state == "after":
            self._text_after_call(self.buf, out, "a Mistral tool call")
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
    buf = Grown()  # the call's text after its name: its arguments, read whole at the block's end
    def __init__(self, calls, markup, tentative=False):
        super().__init__(calls, markup, tentative)
        self.buf = ""
        self.state = "name"
        self.name = ""

    @property
    def quoting(self) -> bool:
        return self.state == "args" and py_in_string(self.buf)

    def feed(self, text: str) -> list[TokenEvent]:
        Body.raw.grow(self, text)
        PythonicCall.buf.grow(self, text)
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
                log.warning("tool call %s (%s): arguments not understood (%s): %s", self.index, self.name,
                            type(exc).__name__, excerpt(log, self.buf))
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
                if self.any:  # text after the block's calls: returned as text
                    self.state = "after"
                    return True
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
        if self.state == "after":
            self._text_after_call(self.buf, out, "a Gemma tool call")
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
