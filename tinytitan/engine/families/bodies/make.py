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
plus the tag table in ``bodies/tagged.py``); the tests check the decoders against the grammars on every
scripted block and against mlx-lm's parsers on the same blocks.

Where they are: ``bodies/base.py`` (call numbering and the Body interface), ``bodies/json_objects.py`` (JSON
call objects), ``bodies/tagged.py`` (XML-ish and key/value tags), ``bodies/calls.py`` (Mistral, pythonic, Gemma)
are the kits; each syntax module (``syntaxes/``) names the decoder it uses (or holds its own), and this module picks the one of a
family's syntax.
"""

from __future__ import annotations

from .base import Body, Calls, SteppedBody
from .calls import GemmaCall, MistralCall, PythonicCall
from .json_objects import JsonCalls, JsonSpan, json_in_string, py_in_string
from .tagged import KV, XML, TagSpec, TaggedCall, convert_value
from ..markup import Markup
from ..syntaxes import SYNTAXES

__all__ = ["Body", "Calls", "SteppedBody", "GemmaCall", "MistralCall", "PythonicCall", "JsonCalls", "JsonSpan",
           "json_in_string", "py_in_string", "KV", "XML", "TagSpec", "TaggedCall", "convert_value", "make_body"]


def make_body(markup: Markup, calls: Calls, tentative: bool = False) -> Body:
    """The decoder for a family's call body: its syntax's (``syntaxes/``, named by ``markup.body``); its
    ``format`` names the grammar that checks the block."""
    kind = "json" if tentative else markup.body  # a bare answer is only ever tried as JSON
    syntax = SYNTAXES.get(kind)
    if syntax is None or syntax.decoder is None:
        raise ValueError(f"unknown tool-call body format {kind!r}")
    body = syntax.decoder(calls, markup, tentative)
    body.format = kind
    return body
