"""The tool-call formats as Lark grammars: the authoritative definition of each call syntax, and the check of
every completed call block.

``grammars/<format>.lark`` (a source checkout) or ``tinytitan/_grammars`` (an installed wheel) holds one grammar
per call syntax (``markup.Markup.body`` names them, plus ``harmony``); each parses one complete block body —
the text between the family's tool-call markers, as ``bodies.py`` collects it in ``Body.raw`` — into calls.

- ``parse_block(format, text, tools)`` → ``[(name, arguments JSON text)]``, or ``BlockMismatch`` naming the
  format and where the text stops matching. Each grammar is compiled once (LALR), on first use.
- ``check_block(format, text, streamed, tools)``: called once per completed block by the streaming parsers
  (``scanner.py``, ``harmony.py``); compares the grammar's calls with the ones the streaming decoder already
  sent (names, and arguments as JSON values). A disagreement — the grammar rejects markup the decoder
  accepted, or they read different calls — is logged as a warning naming the format. It never raises and
  never changes the events: a client already has them.

A grammar file that does not load fails with ``GrammarError("<file>: <problem>")``.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
from pathlib import Path

from lark import Lark, Transformer
from lark.exceptions import LarkError, UnexpectedInput, VisitError

from .body import Calls
from .body_tagged import _STRING_TYPES, convert_value

log = logging.getLogger("tinytitan.parser")

# format -> grammar file (json_value.lark is shared by the formats whose arguments are JSON)
FORMATS = {
    "json": "json.lark",
    "xml": "xml.lark",
    "kv": "kv.lark",
    "mistral": "mistral.lark",
    "pythonic": "pythonic.lark",
    "gemma4": "gemma4.lark",
    "function_gemma": "function_gemma.lark",
    "harmony": "harmony.lark",
}
STRING_DELIMITERS = {"gemma4": '<|"|>', "function_gemma": "<escape>"}


class GrammarError(ValueError):
    """A grammar file that does not load."""


class BlockMismatch(ValueError):
    """A block the format's grammar does not accept."""


def grammar_dir(package: Path | None = None) -> Path:
    """grammars/ beside the package in a source checkout; the copy inside the package in an installed wheel
    (pyproject force-includes grammars/ as ``tinytitan/_grammars``)."""
    here = package or Path(__file__).resolve().parents[2]  # the tinytitan package
    for candidate in (here.parent / "grammars", here / "_grammars"):
        if (candidate / FORMATS["json"]).is_file():
            return candidate
    raise GrammarError(f"no grammars directory found near {here}")


@functools.lru_cache(maxsize=None)
def load(fmt: str, directory: Path | None = None) -> Lark:
    """The compiled parser of one format (cached)."""
    if fmt not in FORMATS:
        raise GrammarError(f"no grammar for tool-call format {fmt!r}")
    path = (directory or grammar_dir()) / FORMATS[fmt]
    try:
        return Lark.open(str(path), parser="lalr", lexer="contextual", maybe_placeholders=False)
    except (LarkError, OSError, ValueError) as exc:  # lark reports some grammar errors as its parse errors
        raise GrammarError(f"{path}: {type(exc).__name__}: {exc}") from exc


def parse_block(fmt: str, text: str, tools: dict[str, dict] | None = None) -> list[tuple[str, str]]:
    """The calls in one complete block: ``[(name, arguments JSON text)]``. ``tools`` (name -> JSON schema of
    its parameters) types the tagged values of ``xml`` / ``kv`` as the streaming decoders do."""
    parser = load(fmt)
    try:
        tree = parser.parse(text)
    except UnexpectedInput as exc:
        raise BlockMismatch(f"{fmt} grammar ({FORMATS[fmt]}): {_first_line(exc)}") from None
    try:
        calls = _TRANSFORMERS[fmt](fmt, tools).transform(tree)
    except VisitError as exc:
        raise BlockMismatch(f"{fmt} grammar ({FORMATS[fmt]}): {exc.orig_exc}") from None
    return calls


def check_block(fmt: str, text: str, streamed: list[tuple[str, str]], tools: dict[str, dict] | None = None) -> bool:
    """Whether the grammar reads the calls the streaming decoder sent; a disagreement is logged (never raised)."""
    try:
        parsed = parse_block(fmt, text, tools)
    except BlockMismatch as exc:
        if streamed:
            # the block is the model's answer (a call's arguments: file contents, commands): its text only at debug
            # (a grammar error quotes the text it stopped at, so it goes to debug too)
            log.warning("%s tool-call grammar rejects a block (%d chars) the streaming decoder read as %s: %s",
                        fmt, len(text), [n for n, _ in streamed], type(exc).__name__)
            log.debug("%s tool-call block the grammar rejects: %s; block: %r", fmt, exc, text[:200])
            return False
        log.debug("%s tool-call block rejected by the grammar and the decoder: %s", fmt, exc)
        return True
    except Exception as exc:  # noqa: BLE001 — a broken grammar must not fail a request
        log.warning("%s tool-call grammar check failed: %s: %s", fmt, type(exc).__name__, exc)
        return False
    parsed = [(name, args) for name, args in parsed if name.strip()]  # a nameless call is text to the decoder
    if not _same_calls(parsed, streamed):
        log.warning("%s tool-call grammar and streaming decoder disagree: grammar %r, streamed %r; block: %r",
                    fmt, parsed, streamed, text[:200])
        return False
    return True


def streamed_calls(events) -> list[tuple[str, str]]:
    """(name, arguments) of the calls in a list of events (ToolCallStarted + ToolCallDone by index)."""
    from ...events import ToolCallDone, ToolCallStarted

    names = {e.index: e.name for e in events if isinstance(e, ToolCallStarted)}
    args = {e.index: e.arguments for e in events if isinstance(e, ToolCallDone)}
    return [(names[i], args.get(i, "")) for i in sorted(names)]


def _same_calls(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> bool:
    return len(a) == len(b) and all(na == nb and _json_value(xa) == _json_value(xb)
                                    for (na, xa), (nb, xb) in zip(a, b))


def _json_value(text: str) -> str:
    """Arguments as a canonical JSON text (key order and spacing aside; 1, 1.0 and true stay distinct)."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):
        return "not JSON: " + text


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------------------
# Trees into calls, one Transformer per grammar
# ---------------------------------------------------------------------------------------------------------

class _Base(Transformer):
    """Rules imported from another grammar come namespaced (``json_value__object``): they are dispatched by
    their own name. JSON values become Python values."""

    def __init__(self, fmt: str, tools: dict[str, dict] | None):
        super().__init__()
        self.fmt = fmt
        self.types = Calls(tools=tools or {})

    def __default__(self, data, children, meta):
        short = str(data).rsplit("__", 1)[-1]
        if short != data and hasattr(self, short):
            return getattr(self, short)(children)
        return super().__default__(data, children, meta)

    # json_value.lark
    def object(self, children):
        return dict(children)

    def pair(self, children):
        return json.loads(children[0]), children[1]

    def array(self, children):
        return list(children)

    def string(self, children):
        return json.loads(children[0])

    def number(self, children):
        return json.loads(children[0])

    def true(self, _):
        return True

    def false(self, _):
        return False

    def null(self, _):
        return None

    def _typed(self, name: str, key: str, text: str, unknown_is_string: bool, trim) -> object:
        typ = self.types.param_type(name, key)
        if typ in _STRING_TYPES or (typ is None and unknown_is_string):
            return text
        return convert_value(trim(text), typ, unknown_is_string)


class _JsonCalls(_Base):
    def start(self, children):
        return [c for c in children if isinstance(c, tuple)]

    json_calls = start

    def call(self, members):
        names = [v for k, v in members if k == "name"]
        nested = [v for k, v in members if k == "function"]
        if nested:
            return nested[0]
        if len(names) != 1:
            raise ValueError(f"a call object needs one \"name\" (has {len(names)})")
        args = next((v for k, v in members if k == "arguments"), {})
        if isinstance(args, str):  # arguments written as a JSON string holding JSON: that JSON
            return names[0], args
        return names[0], _dumps(args)

    def name(self, children):
        return "name", json.loads(children[1])

    def arguments(self, children):
        return "arguments", children[1]

    def function(self, children):
        return "function", children[1]

    def other(self, children):
        return "other", None


class _Mistral(_JsonCalls):
    def start(self, children):
        return children[0] if isinstance(children[0], list) else [children[0]]

    def named_call(self, children):
        return str(children[0]), _dumps(children[-1])


class _Xml(_Base):
    def start(self, children):
        name = str(children[0])[len("<function="):-1].strip()
        args = children[1] if len(children) > 1 else {}
        if isinstance(args, list):  # parameter tags
            args = {key: self._typed(name, key, value, True, str) for key, value in args}
        return [(name, _dumps(args))]

    def parameters(self, tokens):
        out = []
        for tok in tokens:
            key, _, value = str(tok)[len("<parameter="):-len("</parameter>")].partition(">")
            value = value[1:] if value.startswith("\n") else value
            out.append((key.strip(), _trim_newline(value)))
        return out


class _Kv(_Base):
    def start(self, children):
        name = str(children[0])
        args = children[1] if len(children) > 1 else {}
        if isinstance(args, list):
            args = {key: self._typed(name, key, value, False, str.strip) for key, value in args}
        return [(name, _dumps(args))]

    def args(self, children):
        return children

    def arg(self, children):
        key = str(children[0])[len("<arg_key>"):-len("</arg_key>")].strip()
        return key, str(children[1])[len("<arg_value>"):-len("</arg_value>")]


class _Pythonic(_Base):
    def start(self, calls):
        return calls

    def call(self, children):
        kwargs = dict(children[1:])
        return str(children[0]), _dumps(kwargs)

    def kwarg(self, children):
        return str(children[0]), children[1]

    def string(self, children):
        return ast.literal_eval(children[0])

    def number(self, children):
        return ast.literal_eval(children[0])

    def constant(self, children):
        return {"True": True, "true": True, "False": False, "false": False}.get(str(children[0]))

    def list(self, children):
        return children

    tuple = list

    def dict(self, children):
        return {k: v for k, v in children}

    def entry(self, children):
        return children[0], children[1]


class _Gemma(_Base):
    def start(self, calls):
        return calls

    def call(self, children):
        return str(children[0])[len("call:"):], _dumps(children[1])

    def object(self, children):
        return dict(children)

    def pair(self, children):
        return children[0], children[1]

    def bare_key(self, children):
        return str(children[0])

    def string_key(self, children):
        return self._unquote(children[0])

    def string(self, children):
        return self._unquote(children[0])

    def bare(self, children):
        text = str(children[0])
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _unquote(self, token) -> str:
        n = len(STRING_DELIMITERS[self.fmt])
        return str(token)[n:-n]


class _Harmony(_Base):
    def start(self, children):
        return [(children[0], _dumps(children[1]))]

    def header(self, children):
        recipient = next(str(c) for c in children if getattr(c, "type", "") == "RECIPIENT")[len("to="):]
        return recipient.removeprefix("functions.")

    def content_type(self, children):
        return None


def _trim_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


_TRANSFORMERS = {"json": _JsonCalls, "mistral": _Mistral, "xml": _Xml, "kv": _Kv, "pythonic": _Pythonic,
                 "gemma4": _Gemma, "function_gemma": _Gemma, "harmony": _Harmony}
