"""What a model family writes around reasoning and tool calls: the marker table one scanner reads.

A family's output is text with markers. ``Markup`` names them; ``body`` names the syntax a tool call's inside
is written in (one module each in ``syntaxes/``, which owns its decoder, grammar, forcing and rendering):

- ``json``: ``{"name": …, "arguments"|"parameters": {…}}`` objects, one or several (a list, or ``;`` / ``,``
  separated) — Qwen / Qwen2.5 / Llama 3.x / Mistral's older list form.
- ``xml``: ``<function=NAME><parameter=P>value</parameter>…</function>`` — Qwen3-coder.
- ``kv``: ``NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>…`` — GLM 4.5 / 4.6 / 4.7.
- ``mistral``: ``NAME[ARGS]{json}`` (newer tokenizers) or a JSON list (older ones) after ``[TOOL_CALLS]``.
- ``pythonic``: ``NAME(k="v", n=2)`` — Gemma's ```` ```tool_code ```` fences.
- ``gemma4`` / ``function_gemma``: ``call:NAME{k:<|"|>v<|"|>,n:2}`` (``<escape>`` for FunctionGemma).

A call whose format has no closing marker (Mistral, Llama's ``<|python_tag|>``) runs to the next opening
marker or to the end of the generation (the end-of-turn token, which the decoder stops on).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

REASONING, TEXT, TOOL = "reasoning", "text", "tool"


@dataclass(frozen=True)
class Markup:
    think_open: str | None = "<think>"
    think_close: str | None = "</think>"
    tool_open: str | None = "<tool_call>"
    tool_close: str | None = "</tool_call>"
    body: str = "json"
    bare_json: bool = False  # an answer that begins with a JSON call object is a call (Llama 3.x, Gemma)
    # the call opener, a special token no prose writes, also ends an open thought: Kimi K2 Thinking opens its call
    # section without closing its thought at times (vLLM's kimi_k2 reasoning parser splits there too)
    tool_ends_thought: bool = False


QWEN = Markup()
PLAIN = Markup(None, None, None, None)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def partial_suffix(buf: str, marker: str) -> int:
    """Length of the longest suffix of buf that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(buf)), 0, -1):
        if buf.endswith(marker[:n]):
            return n
    return 0


def find_first(buf: str, markers) -> tuple[int, str] | None:
    """The earliest occurrence of any marker in buf (longest first at a tie)."""
    best = None
    for s in markers:
        if not s:
            continue
        i = buf.find(s)
        if i >= 0 and (best is None or i < best[0] or (i == best[0] and len(s) > len(best[1]))):
            best = (i, s)
    return best


def hold_length(buf: str, markers) -> int:
    return max((partial_suffix(buf, s) for s in markers if s), default=0)
