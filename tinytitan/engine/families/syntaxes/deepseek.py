"""DeepSeek V3.1 (and V3.2-Exp): the calls of a turn in one section, each its name and JSON arguments between
call markers, every marker one token:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

The section's own markers are the family's ``tool_open`` / ``tool_close``; the per-call ones are a ``Section``
row, so another family writing this shape (Kimi K2, ``kimi.py``; DeepSeek's own older format, the type before the
separator and the name and fenced arguments after it, ``deepseek_r1.py``) is a row reusing the decoder.

- decoder: ``SectionCalls`` (below): the name when its separator comes, the arguments streamed as written,
  the call done at its closing marker (a marker inside a JSON string is part of the string);
- checking grammar: ``grammars/deepseek.lark``;
- forcing: the section with one call, or several where parallel calls are allowed, arguments held to the
  tool's schema (compact or spaced JSON, one space at most between tokens: the template writes the arguments
  text as given, so the models have seen both), a custom tool's input to its grammar (JSON-escaped, as in every JSON syntax);
- rendering: the section as the model writes it; history: the template concatenates ``arguments``, so they
  reach it as JSON text.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Callable

from ....events import TextDelta, ToolCallDone, TokenEvent
from ....logtext import excerpt
from ...structured.compile import ONE_SPACE
from ...structured.tool_calls import json_call_rules, marker, more_calls
from ..bodies.base import SteppedBody
from ..bodies.json_objects import JsonSpan
from ..markup import partial_suffix
from .base import CallsTransformer, Syntax, arguments_value, dumps

log = logging.getLogger("tinytitan.parser")


@dataclass(frozen=True)
class Section:
    call_open: str
    sep: str  # between a call's head (its name, or an id naming it) and its arguments
    call_close: str
    name_of: Callable[[str], str | None]  # the head → the function's name (None: not a call)
    head: Callable[[str, int], str]  # (name, index) → the head a rendering writes
    head_rule: Callable[[str, dict], str]  # (lark spelling of the name, vocab) → the head's lark spelling
    # the older DeepSeek format (V3-0324, R1): the head is the call's type, the name follows the separator on a
    # line of its own, and the arguments stand in this fence (its opening, its closing); None: they follow the
    # separator
    fence: tuple[str, str] | None = None
    between: str = ""  # what the template writes between two calls of a section


def _plain_name(head: str) -> str | None:
    head = head.strip()
    return head if head and not any(c.isspace() or c in "<>{}" for c in head) else None


DEEPSEEK = Section("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", _plain_name,
                   lambda name, i: name, lambda name, vocab: name)


class SectionCalls(SteppedBody):
    """The inside of a section: calls ``call_open HEAD sep {json} call_close``, whitespace between them."""

    def __init__(self, calls, markup, section: Section, tentative=False):
        super().__init__(calls, markup, tentative)
        self.s = section
        self.buf = ""
        self.state = "between"
        self.args = ""
        self.span: JsonSpan | None = None
        self.junk = ""
        self.head = ""  # the older format: the call's type and the separator, while its name is read
        self.fenced = False  # the older format: the arguments' closing fence was read (or left out)

    @property
    def quoting(self) -> bool:
        return self.state == "args" and self.span is not None and self.span.in_string

    def _step(self, out: list) -> bool:
        s, st = self.s, self.state
        if st == "between":
            text = self.buf.lstrip()
            if not text:
                if self.junk:  # whitespace inside that text is kept
                    self.junk += self.buf
                self.buf = ""
                return False
            if text.startswith(s.call_open):
                self.buf, self.state = text[len(s.call_open):], "head"
                return True
            if s.call_open.startswith(text):
                if not self.junk:
                    self.buf = text
                return False
            # not a call: text (logged at the close), up to a call that follows it
            src = self.buf if self.junk else text
            i = src.find(s.call_open)
            if i < 0:
                keep = partial_suffix(src, s.call_open)
                self.junk, self.buf = self.junk + src[: len(src) - keep], src[len(src) - keep:]
                return False
            self.junk, self.buf = self.junk + src[:i], src[i:]
            return True
        if st == "head":
            i = self.buf.find(s.sep)
            if i < 0:
                if len(self.buf) > 200:
                    self.junk, self.buf, self.state = self.junk + s.call_open + self.buf, "", "between"
                return False
            name = s.name_of(self.buf[:i])
            if name is None:
                self.junk += s.call_open + self.buf[: i + len(s.sep)]
                self.buf, self.state = self.buf[i + len(s.sep):], "skip"
                return True
            self.head, self.buf = self.buf[: i + len(s.sep)], self.buf[i + len(s.sep):]
            if s.fence is not None:  # the head was the call's type: the name comes next
                self.state = "name"
                return True
            self._start(name, out)
            self.args, self.span, self.state = "", JsonSpan(), "args"
            return True
        if st == "name":  # the older format: the name, up to the end of its line (or the fence, or the arguments)
            ends = [j for j in (self.buf.find("\n"), self.buf.find(s.fence[0][:1]), self.buf.find("{")) if j >= 0]
            if not ends:
                if len(self.buf) > 200:
                    self.junk, self.buf, self.state = self.junk + s.call_open + self.head + self.buf, "", "skip"
                return False
            name = s.name_of(self.buf[: min(ends)])
            if name is None:
                self.junk += s.call_open + self.head
                self.state = "skip"
                return True
            self.buf = self.buf[min(ends):]
            self._start(name, out)
            self.args, self.span, self.state = "", JsonSpan(), "fence"
            return True
        if st == "fence":  # its opening fence, if the model wrote one, then the arguments
            text = self.buf.lstrip()
            if text.startswith(s.fence[0]):
                text = text[len(s.fence[0]):]
            elif text.startswith(s.fence[1]) and text[len(s.fence[1]):][:1].isspace():  # a fence naming no language
                text = text[len(s.fence[1]):]
            elif s.fence[0].startswith(text):
                self.buf = text
                return False
            text = text.lstrip()
            self.buf = text
            if text:
                self.state = "args"
            return bool(text)
        if st == "args":
            n = self.span.feed(self.buf)
            piece, self.buf = self.buf[:n], self.buf[n:]
            self._emit(out, piece)
            if self.span.done:
                self.state = "tail"
                return True
            return False
        if st == "tail":  # after the arguments: the call's closing marker
            text = self.buf.lstrip()
            if s.fence is not None and not self.fenced:  # the older format: the fence's close first, if written
                if text.startswith(s.fence[1]):
                    text, self.fenced = text[len(s.fence[1]):].lstrip(), True
                elif s.fence[1].startswith(text):
                    self.buf = text
                    return False
                else:
                    self.fenced = True
            if text.startswith(s.call_close):
                self.buf = text[len(s.call_close):]
                out.append(ToolCallDone(self.index, self.args))
                self.state, self.fenced = "between", False
                return True
            if not text or s.call_close.startswith(text):
                self.buf = text
                return False
            out.append(ToolCallDone(self.index, self.args))  # the closer is missing: the call is whole anyway
            log.warning("tool call %s: no %s after its arguments", self.index, s.call_close)
            self.state, self.fenced = "between", False
            return True
        if st == "skip":  # a call whose head is not understood: up to its closing marker
            i = self.buf.find(s.call_close)
            if i < 0:
                keep = partial_suffix(self.buf, s.call_close)
                self.junk += self.buf[: len(self.buf) - keep]
                self.buf = self.buf[len(self.buf) - keep:]
                return False
            self.junk += self.buf[: i + len(s.call_close)]
            self.buf, self.state = self.buf[i + len(s.call_close):], "between"
            return True
        return False

    def close(self, truncated: bool) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        if self.state in ("args", "fence"):
            log.warning("tool call %s: arguments cut short", self.index)
            out.append(ToolCallDone(self.index, self.args, complete=False))
        elif self.state == "tail":
            out.append(ToolCallDone(self.index, self.args))
        elif self.state == "head" and self.buf.strip():
            self.junk += self.s.call_open + self.buf
        elif self.state == "name":
            self.junk += self.s.call_open + self.head + self.buf
        self.state = "done"
        if not self.any:
            return self._as_text(truncated) if self.raw.strip() else []
        if self.junk.strip():
            log.warning("text inside a tool-call section; returned as text: %s", excerpt(log, self.junk))
            out.append(TextDelta(self.junk.strip()))
        return out


class Transformer(CallsTransformer):
    def start(self, calls):
        return calls

    def call(self, children):
        return str(children[0]), dumps(children[1])


def section_syntax(name: str, grammar: str, section: Section, transformer=Transformer, history=None) -> Syntax:
    """A syntax of this shape for ``section``'s markers."""

    def decoder(calls, markup, tentative=False):
        return SectionCalls(calls, markup, section, tentative)

    def blocks(family, tools, parallel, vocab, loose=False):
        m = family.markup
        opened, sep, closed = (marker(t, vocab) for t in (section.call_open, section.sep, section.call_close))
        fence = section.fence
        # between the name and the arguments: the separator, or (the older format) the opening fence on a line of its
        # own; the arguments end the call, or their closing fence does
        named = sep if fence is None else json.dumps(f"\n{fence[0]}\n")
        call, rules = json_call_rules(tools, "arguments", loose, named=named, layout=ONE_SPACE)
        # each call alternative is spelled '"NAME" SEP …': the head's own spelling replaces the quoted name
        rules = [_respell_head(r, tools, section, vocab) for r in rules]
        one = f"one: {opened} call {'' if fence is None else json.dumps(chr(10) + fence[1]) + ' '}{closed}"
        body = "one" + more_calls(f"{json.dumps(section.between) + ' ' if section.between else ''}one", parallel)
        return [f"blocks: {marker(m.tool_open, vocab)} {body} {marker(m.tool_close, vocab)}", one, call, *rules]

    def render(calls, family) -> str:
        m = family.markup
        fence = section.fence
        inner = section.between.join(
            f"{section.call_open}{section.head(n, i)}{section.sep}"
            + ("" if fence is None else f"{n}\n{fence[0]}\n")
            + json.dumps(arguments_value(a), ensure_ascii=False)
            + ("" if fence is None else f"\n{fence[1]}") + section.call_close
            for i, (n, a) in enumerate(calls))
        return f"{m.tool_open}{inner}{m.tool_close}"

    return Syntax(name, grammar, transformer, decoder, blocks, render, history=history or (lambda msgs: msgs),
                  auto=True)


def _respell_head(rule: str, tools, section: Section, vocab: dict) -> str:
    for tool in tools:
        quoted = json.dumps(tool.name)
        head = section.head_rule(quoted, vocab)
        if head != quoted and rule.split(":", 1)[1].lstrip().startswith(quoted + " "):
            name, body = rule.split(":", 1)
            return f"{name}: {head}{body.lstrip()[len(quoted):]}"
    return rule


def _arguments_as_text(messages: list[dict]) -> list[dict]:
    """DeepSeek's template concatenates a call's ``arguments``: they reach it as JSON text."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [
                {**c, "function": {**c["function"], "arguments": a if isinstance(a := c["function"].get(
                    "arguments", {}), str) else json.dumps(a, ensure_ascii=False)}}
                for c in m["tool_calls"]]}
        if m.get("role") == "assistant" and m.get("content") is None:
            m = {**m, "content": ""}
        out.append(m)
    return out


SYNTAX = section_syntax("deepseek", "deepseek.lark", DEEPSEEK, history=_arguments_as_text)
