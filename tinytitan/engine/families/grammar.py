"""The tool-call formats as Lark grammars: the authoritative definition of each call syntax, and the check of
every completed call block.

``grammars/<format>.lark`` (a source checkout) or ``tinytitan/_grammars`` (an installed wheel) holds one grammar
per call syntax (each syntax module in ``syntaxes/`` names its file and the transformer reading its tree); each
parses one complete block body — the text between the family's tool-call markers, as the syntax's decoder
collects it in ``Body.raw`` — into calls.

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

import functools
import json
import logging
from pathlib import Path

from lark import Lark
from lark.exceptions import LarkError, UnexpectedInput, VisitError

from ...logtext import excerpt
from .syntaxes import SYNTAXES

log = logging.getLogger("tinytitan.parser")

# format -> grammar file (json_value.lark is shared by the formats whose arguments are JSON); each syntax module
# (``syntaxes/``) names its file and the transformer that reads its tree
FORMATS = {name: syntax.grammar for name, syntax in SYNTAXES.items()}


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
        calls = SYNTAXES[fmt].transformer(fmt, tools).transform(tree)
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
            log.debug("%s tool-call block the grammar rejects: %s; block: %s", fmt, exc, excerpt(log, text))
            return False
        log.debug("%s tool-call block rejected by the grammar and the decoder: %s", fmt, exc)
        return True
    except Exception as exc:  # noqa: BLE001 — a broken grammar must not fail a request
        log.warning("%s tool-call grammar check failed: %s: %s", fmt, type(exc).__name__, exc)
        return False
    parsed = [(name, args) for name, args in parsed if name.strip()]  # a nameless call is text to the decoder
    if not _same_calls(parsed, streamed):
        log.warning("%s tool-call grammar and streaming decoder disagree: grammar %s, streamed %s; block: %s",
                    fmt, excerpt(log, repr(parsed)), excerpt(log, repr(streamed)), excerpt(log, text))
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


