"""An Ollama chat template (Go's ``text/template``) translated to the Jinja a chat template is.

Rules (what Ollama's ``template.Execute`` hands a template; its ``server/prompt.go`` and ``template`` package):
- a template that reads ``.Messages`` renders once: ``.System`` is every system message's text joined by blank
  lines; ``.Messages`` the conversation (system messages included); ``.Tools`` the tools; ``.Response`` empty;
  in a ``range`` the dot is the item (``.Role``, ``.Content``, ``.ToolCalls``, ``.Function.Name`` …,
  lower-cased as the chat template's messages spell them);
- a template of the older form (no ``.Messages``: ``.System``, ``.Prompt``, ``.Response``) renders once per
  turn: consecutive messages of one role are one message (their texts joined by a blank line); a system
  message, or a user message after an answer, closes the turn before it; a user message is ``.Prompt``, an
  assistant's ``.Response``, a system message ``.System`` (of that turn only); tool messages are left out.
  The last turn renders only up to ``{{ .Response }}`` (what follows it is cut: the model writes it), and a
  template without ``.Response`` gets one at its end;
- printed as Go prints them: ``.Function.Arguments``, a tool, a tool call: JSON;
- Jinja's block tags carry ``+`` unless Go's trim markers say otherwise, so a renderer's ``trim_blocks`` and
  ``lstrip_blocks`` (chat templates render with both) keep every newline Go keeps;
- in both forms consecutive messages of one role are one (tool results apart), as Ollama's ``collate`` has it;
- the mid-2024 dual form, the whole template one ``{{ if .Messages }}…{{ else }}…{{ end }}`` (Ollama's library
  from June to August 2024), renders its ``.Messages`` branch as Ollama then did: ``.System`` every system
  message's text, ``.Messages`` the others (collated); the ``else`` branch (the older form) is never reached;
- ``if`` / ``else if`` / ``else`` / ``range`` (with ``$i, $x :=``) / ``break`` / ``continue`` / ``end``,
  ``$x := …`` and ``$x = …`` (a namespace's attributes: Go's variables outlive a loop's iteration, Jinja's
  do not), comments, the trim markers ``{{-`` and ``-}}``; the functions ``eq ne lt le gt ge and or not len
  index slice json``, and ``printf`` with ``%s``/``%v``/``%d``. Anything else (``with``, ``define``,
  ``template``, pipes, other verbs, ``.Think``, a tool's ``.Properties``, a ``.Prompt`` beside ``.Messages``
  …) raises ``Untranslatable`` naming it: a wrong template is a wrong model.
"""

from __future__ import annotations

import re

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*"|`[^`]*`)|(\()|(\))|(:=)|(,)|(\|)|(\$\w*(?:\.\w+)*)|(\.(?:\w+(?:\.\w+)*)?)'
                    r"|(-?\d+(?:\.\d+)?)|(\w+))")
FIELDS = {"Role": "role", "Content": "content", "ToolCalls": "tool_calls", "Function": "function", "Name": "name",
          "Arguments": "arguments", "Thinking": "reasoning_content", "ToolName": "name", "Images": "images",
          "Description": "description", "Parameters": "parameters", "Type": "type", "Index": "index",
          "ToolCallID": "tool_call_id"}
ROOT = {"System": "_system", "Messages": "_c.msgs", "Tools": "(tools or [])", "Response": "''"}  # no tools: none
LEGACY_ROOT = {"System": "_system", "Prompt": "_prompt", "Response": "_response"}
# the fields Go prints as JSON, printed whole: maps, and the types whose String method marshals them (a tool's
# function, a message's tool calls; the tools themselves too: ROOT's Tools); a Python literal is no one's format
JSON_FIELDS = {"arguments", "parameters", "function", "tool_calls"}
CALLS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
VARS = "{%+ set _v = namespace() +%}"  # the template's $variables
# Ollama's collate: consecutive messages of one role (tool results apart) are one, their texts joined; the
# list is rebuilt only where two are to be joined (a sandboxed template cannot append: rebuilding is quadratic)
COLLATE = ("{%+ set _c = namespace(msgs=_src, merge=false) +%}{%+ for _m in _src[1:] +%}"
           "{%+ if _m.role == _src[loop.index0].role and _m.role != 'tool' +%}{%+ set _c.merge = true +%}"
           "{%+ endif +%}{%+ endfor +%}{%+ if _c.merge +%}{%+ set _c.msgs = [] +%}{%+ for _m in _src +%}"
           "{%+ if _c.msgs and _c.msgs[-1].role == _m.role and _m.role != 'tool' +%}"
           "{%+ set _c.msgs = _c.msgs[:-1] + [dict(_c.msgs[-1], content=(_c.msgs[-1].content or '') ~ '\\n\\n' ~ "
           "(_m.content or ''))] +%}{%+ else +%}{%+ set _c.msgs = _c.msgs + [_m] +%}{%+ endif +%}{%+ endfor +%}"
           "{%+ endif +%}")
# what is collated: every message (today's form), or all but the system messages (the dual form's .Messages)
EVERY = "{%+ set _src = messages +%}"
NOT_SYSTEM = "{%+ set _src = messages | rejectattr('role', 'equalto', 'system') | list +%}"
SYSTEM = ("{%+ set _system = messages | selectattr('role', 'equalto', 'system') | map(attribute='content') "
          "| join('\\n\\n') +%}")


class Untranslatable(ValueError):
    pass


# the older form's turns, as Ollama's ``Execute`` walks the (collated) messages; ``_turn`` is the whole
# template, ``_last`` the template cut after ``{{ .Response }}``
_TURNS = ("{%+ set _ns = namespace(system='', prompt='', response='', role=none) +%}"
          "{%+ for _m in messages +%}{%+ set _t = _m.content or '' +%}"
          "{%+ if _m.role == _ns.role and _m.role != 'tool' +%}"
          "{%+ if _m.role == 'system' +%}{%+ set _ns.system = _ns.system ~ '\\n\\n' ~ _t +%}"
          "{%+ elif _m.role == 'user' +%}{%+ set _ns.prompt = _ns.prompt ~ '\\n\\n' ~ _t +%}"
          "{%+ elif _m.role == 'assistant' +%}{%+ set _ns.response = _ns.response ~ '\\n\\n' ~ _t +%}{%+ endif +%}"
          "{%+ elif _m.role == 'system' or (_m.role == 'user' and _ns.response) +%}"
          "{%+ if _ns.prompt or _ns.response +%}{{ _turn(_ns.system, _ns.prompt, _ns.response) }}"
          "{%+ set _ns.system = '' +%}{%+ set _ns.prompt = '' +%}{%+ set _ns.response = '' +%}{%+ endif +%}"
          "{%+ if _m.role == 'system' +%}{%+ set _ns.system = _t +%}{%+ else +%}{%+ set _ns.prompt = _t +%}{%+ endif +%}"
          "{%+ elif _m.role == 'user' +%}{%+ set _ns.prompt = _t +%}"
          "{%+ elif _m.role == 'assistant' +%}{%+ set _ns.response = _t +%}{%+ endif +%}"
          "{%+ set _ns.role = _m.role +%}{%+ endfor +%}"
          "{{ _last(_ns.system, _ns.prompt, _ns.response) }}")


def translate(source: str) -> str:
    """The Jinja for an Ollama Go template, or Untranslatable naming the construct it cannot carry over."""
    branch = _messages_branch(source)
    if branch is not None:
        source = branch
    if ".Messages" in source:
        out = VARS + SYSTEM + (NOT_SYSTEM if branch is not None else EVERY) + COLLATE + _Translator(ROOT).run(source)
        # a chat template's last newline would be dropped (Jinja's keep_trailing_newline is off); Go keeps it
        return out + "{{ '' }}" if out.endswith("\n") else out
    if ".Response" not in source:  # Ollama's Parse adds one at the end
        source += "{{ .Response }}"
    whole, cut = _Translator(LEGACY_ROOT).run(source), _Translator(LEGACY_ROOT, cut=True).run(source)
    return ("{%+ macro _turn(_system, _prompt, _response) +%}" + VARS + whole + "{%+ endmacro +%}"
            "{%+ macro _last(_system, _prompt, _response) +%}" + VARS + cut + "{%+ endmacro +%}" + _TURNS)


class _Translator:
    def __init__(self, root: dict[str, str], cut: bool = False):
        """``root``: what the top-level fields are; ``cut``: everything after the first ``{{ .Response }}``
        left out (Ollama's ``deleteNode``), the blocks it sits in still closed."""
        self.root = root
        self.dots: list[str | None] = [None]  # what ``.`` is: None at the top, else a loop variable
        self.blocks: list[str] = []
        self.vars: dict[str, str] = {}
        self.n = 0
        self.cut, self.cutting, self.skipped = cut, False, 0

    def run(self, source: str) -> str:
        out, pos = [], 0
        for m in _ACTION.finditer(source):
            if not self.cutting:
                out.append(_text(source[pos:m.start()]))
            pos = m.end()
            left, body, right = "-" if m.group(1) else "", m.group(2).strip(), "-" if m.group(3) else ""
            out.append(self.after_cut(body) if self.cutting else self.action(body, left, right))
            if self.cut and not self.cutting and _prints_response(body):
                self.cutting = True
        if not self.cutting:
            out.append(_text(source[pos:]))
        if self.blocks:
            raise Untranslatable(f"the template leaves {{{{ {self.blocks[-1]} }}}} without its {{{{ end }}}}")
        return "".join(out)

    def after_cut(self, body: str) -> str:
        """Past the cut, only the ends of the blocks the cut sits in are written."""
        word = body.split(None, 1)[0] if body else ""
        if word in ("if", "range", "with", "block"):
            self.skipped += 1
        elif word == "end" and self.skipped:
            self.skipped -= 1
        elif word == "end":
            return self.action(body, "", "")
        return ""

    def action(self, body: str, left: str, right: str) -> str:
        def tag(inner: str) -> str:  # "+": no trim_blocks / lstrip_blocks (chat templates render with both)
            return f"{{%{left or '+'} {inner} {right or '+'}%}}"

        if body.startswith("/*"):
            return tag("if false") + tag("endif") if left or right else ""
        word = body.split(None, 1)[0] if body else ""
        rest = body[len(word):].strip()
        if word == "if":
            self.blocks.append("if")
            return tag(f"if {self.expr(rest)}")
        if word == "else":
            if rest.startswith("if "):
                return tag(f"elif {self.expr(rest[3:])}")
            if rest:
                raise Untranslatable(f"{{{{ else {rest} }}}} is not translated")
            return tag("else")
        if word == "end":
            if not self.blocks:
                raise Untranslatable("{{ end }} without a block")
            kind = self.blocks.pop()
            if kind == "for":
                self.dots.pop()
            return tag("endfor" if kind == "for" else "endif")
        if word == "range":
            return tag(self.range(rest))
        if word in ("break", "continue") and not rest:
            if "for" not in self.blocks:
                raise Untranslatable(f"{{{{ {word} }}}} outside a range")
            return tag(word)  # chat templates render with Jinja's loopcontrols
        if word in ("with", "define", "template", "block", "break", "continue"):
            raise Untranslatable(f"{{{{ {word} }}}} is not translated")
        m = re.fullmatch(r"\$(\w+)\s*(:?=)\s*(.+)", body, re.S)
        if m:  # a namespace attribute: Jinja's loops would scope a plain variable, Go's do not
            name, op, value = m.groups()
            if op == "=" and self.vars.get(name) != f"_v.{name}":
                raise Untranslatable(f"${name} is assigned before it is declared")
            value = self.expr(value)
            self.vars[name] = f"_v.{name}"
            return tag(f"set _v.{name} = {value}")
        return f"{{{{{left} {self.expr(body, printed=True)} {right}}}}}"

    def range(self, rest: str) -> str:
        m = re.fullmatch(r"(?:\$(\w+)\s*(?:,\s*\$(\w+))?\s*:=\s*)?(.+)", rest, re.S)
        first, second, over = m.group(1), m.group(2), m.group(3)
        iterable = self.expr(over)  # (read before the loop's own variables are declared, as Go reads it)
        self.n += 1
        item = f"_x{self.n}"
        self.blocks.append("for")
        self.dots.append(item)
        if first and second:  # the index, as a variable of the loop's body: a nested loop's body still reads it
            self.vars[first], self.vars[second] = f"_i{self.n}", item
            return f"for {item} in {iterable} +%}}{{%+ set _i{self.n} = loop.index0"
        if first:
            self.vars[first] = item
        return f"for {item} in {iterable}"

    # -- expressions --------------------------------------------------------------------------------------
    def expr(self, text: str, printed: bool = False) -> str:
        tokens = self.tokens(text)
        value, at = self.pipeline(tokens, 0)
        if at != len(tokens):
            raise Untranslatable(f"{{{{ {text} }}}} is not translated")
        if printed and (value.endswith(tuple(f".{f}" for f in JSON_FIELDS)) or self._is_whole_item(value)
                        or value == ROOT["Tools"]):
            return f"{value} | tojson"
        return value

    def _is_whole_item(self, value: str) -> bool:
        return bool(re.fullmatch(r"_x\d+", value))

    def tokens(self, text: str) -> list[tuple[str, str]]:
        out, pos = [], 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise Untranslatable(f"{{{{ {text} }}}} is not translated")
            kinds = ("str", "(", ")", ":=", ",", "|", "var", "field", "num", "ident")
            kind = next(k for k, g in zip(kinds, m.groups()) if g is not None)
            if kind == "|":
                raise Untranslatable(f"the pipe in {{{{ {text} }}}} is not translated")
            out.append((kind, m.group(m.lastindex)))
            pos = m.end()
        return out

    def pipeline(self, tokens, at):
        if at < len(tokens) and tokens[at][0] == "ident" and tokens[at][1] not in ("true", "false", "nil"):
            name = tokens[at][1]
            args, at = [], at + 1
            while at < len(tokens) and tokens[at][0] != ")":
                arg, at = self.term(tokens, at)
                args.append(arg)
            return self.call(name, args), at
        return self.term(tokens, at)

    def term(self, tokens, at):
        kind, text = tokens[at]
        if kind == "(":
            value, at = self.pipeline(tokens, at + 1)
            if at >= len(tokens) or tokens[at][0] != ")":
                raise Untranslatable("an unclosed parenthesis is not translated")
            return f"({value})", at + 1
        if kind == "str":
            return (repr(text[1:-1]) if text[0] == "`" else repr(_go_string(text))), at + 1
        if kind == "num":
            return text, at + 1
        if kind == "ident":
            return {"true": "true", "false": "false", "nil": "none"}.get(text, text), at + 1
        if kind == "var":
            return self.variable(text), at + 1
        if kind == "field":
            return self.field(self.dots[-1], text[1:]), at + 1
        raise Untranslatable(f"{text!r} is not translated")

    def variable(self, text: str) -> str:
        name, _, path = text[1:].partition(".")
        if name == "":
            return self.field(None, path) if path else "none"
        if name not in self.vars:
            raise Untranslatable(f"${name} is not declared")
        return self.field(self.vars[name], path) if path else self.vars[name]

    def field(self, base: str | None, path: str) -> str:
        if not path:
            if base is None:
                raise Untranslatable("the top-level dot is not translated")
            return base
        parts = path.split(".")
        if base is None:
            if parts[0] not in self.root:
                raise Untranslatable(f".{parts[0]} is not translated (a field the chat template has no value "
                                     f"for{' beside .Messages' if 'Messages' in self.root else ''})")
            base, parts = self.root[parts[0]], parts[1:]
        for p in parts:
            if p not in FIELDS:
                raise Untranslatable(f".{p} is not translated")
            base = f"{base}.{FIELDS[p]}"
        return base

    def printf(self, args: list[str]) -> str:
        """Go's ``printf`` with the verbs that print a text as it is (``%s``, ``%v``, ``%d``, ``%%``)."""
        if args[0][:1] not in ("'", '"'):
            raise Untranslatable("printf with a format that is not a literal is not translated")
        fmt = _go_string(args[0])
        verbs = re.findall(r"%.", fmt)
        if any(v not in ("%s", "%v", "%d", "%%") for v in verbs) or len(args) - 1 != sum(v != "%%" for v in verbs):
            raise Untranslatable(f"printf {args[0]} is not translated (only %s, %v, %d, one argument each)")
        fmt = fmt.replace("%v", "%s").replace("%d", "%s")
        return f"({fmt!r} | format({', '.join(args[1:])}))"

    def call(self, name: str, args: list[str]) -> str:
        if name in CALLS and len(args) >= 2:
            if name == "eq" and len(args) > 2:
                return "(" + " or ".join(f"{args[0]} == {a}" for a in args[1:]) + ")"
            return f"({args[0]} {CALLS[name]} {args[1]})"
        if name in ("and", "or") and len(args) >= 2:
            return "(" + f" {name} ".join(args) + ")"
        if name == "not" and len(args) == 1:
            return f"(not {args[0]})"
        if name == "len" and len(args) == 1:
            return f"({args[0]} | length)"
        if name == "index" and len(args) == 2:
            return f"{args[0]}[{args[1]}]"
        if name == "slice" and len(args) in (2, 3):
            return f"{args[0]}[{args[1]}:{args[2] if len(args) == 3 else ''}]"
        if name == "json" and len(args) == 1:
            return f"({args[0]} | tojson)"
        if name == "printf" and args:
            return self.printf(args)
        raise Untranslatable(f"the function {name!r} is not translated")


def _messages_branch(source: str) -> str | None:
    """The dual form (the whole template ``{{ if .Messages }}A{{ else }}B{{ end }}``, text around it only
    white space) → A with what is around the block, its trim markers applied; None for any other template."""
    actions = list(_ACTION.finditer(source))
    if not actions or actions[0].group(2).strip() != "if .Messages" or source[:actions[0].start()].strip():
        return None
    depth, otherwise = 0, None
    for m in actions:
        word = (m.group(2).strip().split(None, 1) or [""])[0]
        if word in ("if", "range", "with", "block"):
            depth += 1
        elif word == "else" and depth == 1:
            if m.group(2).strip() != "else" or otherwise is not None:
                return None  # an else-if chain: not the dual form
            otherwise = m
        elif word == "end":
            depth -= 1
            if depth == 0:
                if otherwise is None or source[m.end():].strip():
                    return None
                opened = actions[0]
                before, branch, after = source[:opened.start()], source[opened.end():otherwise.start()], source[m.end():]
                if opened.group(1):
                    before = before.rstrip()
                if opened.group(3):
                    branch = branch.lstrip()
                if otherwise.group(1):
                    branch = branch.rstrip()
                if m.group(3):
                    after = after.lstrip()
                return before + branch + after
    return None


def _prints_response(body: str) -> bool:
    """An action that is not a block's header and reads ``.Response`` (where Ollama's cut falls)."""
    word = body.split(None, 1)[0] if body else ""
    return word not in ("if", "else", "range", "with", "end") and bool(re.search(r"(?<![\w$])\$?\.Response\b", body))


_GO_ESCAPES = {"a": b"\a", "b": b"\b", "f": b"\f", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v",
               "\\": b"\\", '"': b'"', "'": b"'"}
_GO_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|([0-7]{3})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))", re.S)


def _go_string(literal: str) -> str:
    """A Go interpreted string literal's text, as Go reads it: ``\\xNN`` and ``\\NNN`` are bytes (``"\\xc3\\xa9"`` is
    "é"), ``\\u``/``\\U`` code points, the one-letter escapes their characters. One Go would refuse, or whose bytes
    are not UTF-8, is not translated, never a traceback or a garbled prompt."""
    body, out, at = literal[1:-1], bytearray(), 0
    for m in _GO_ESCAPE.finditer(body):
        out += body[at:m.start()].encode()
        hexa, octal, u4, u8, one = m.groups()
        if hexa or octal:
            value = int(hexa, 16) if hexa else int(octal, 8)
            if value > 255:
                raise Untranslatable(f"the string literal {literal[:40]} is not translated (octal escape past 255)")
            out.append(value)
        elif u4 or u8:
            try:
                out += chr(int(u4 or u8, 16)).encode()
            except (ValueError, UnicodeEncodeError):
                raise Untranslatable(f"the string literal {literal[:40]} is not translated (no code point)") from None
        elif one in _GO_ESCAPES and (one != "'" or literal[0] == "'"):
            out += _GO_ESCAPES[one]
        else:
            raise Untranslatable(f"the string literal {literal[:40]} is not translated (unknown escape \\{one})")
        at = m.end()
    out += body[at:].encode()
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise Untranslatable(f"the string literal {literal[:40]} is not translated (its bytes are not UTF-8)") from None


def _text(s: str) -> str:
    """Literal text, with anything Jinja would read as markup kept literal."""
    if not any(mark in s for mark in ("{{", "{%", "{#", "}}", "%}", "#}")):
        return s
    return "{%+ raw %}" + s + "{%+ endraw +%}"  # (Jinja's raw tag takes no "+" before its %})
