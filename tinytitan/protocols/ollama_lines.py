"""Ollama's answer lines: the bookkeeping its event grammar (spec/ollama.yaml) keeps while the lines go out, the
hooks that fill it, and the fold of the lines into the one object ``stream: false`` answers.

Rules:
- Durations are nanoseconds, from the engine's own timing of the turn (``Finished.timing``):
  ``load_duration`` making the model resident, ``prompt_eval_duration`` reading the prompt (to the first
  token), ``eval_duration`` the rest; ``total_duration`` is all of it, queue wait and template included.
- A call's arguments are a JSON object (``arguments_object``); a text line carries its tokens' log
  probabilities where the request asked, empty lists left out as Ollama leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ApiError
from ..events import Timing
from ..speclang.machine import Machine, WireEvent
from .common import TextRuns, arguments_object, token_logprobs


def _ns(seconds: float | None) -> int:
    return int(round((seconds or 0.0) * 1e9))


@dataclass
class OllamaState(TextRuns):
    """A line stream's bookkeeping (``vars`` in spec/ollama.yaml): the call being read, the timings, the text
    runs."""

    call_id: str | None = None
    call_name: str | None = None
    call_arguments: dict = field(default_factory=dict)
    total_duration: int = 0
    load_duration: int = 0
    prompt_eval_duration: int = 0
    eval_duration: int = 0
    logprobs: list | None = None  # the text line going out: its tokens' log probabilities (None: none to send)


def on_finished(m: Machine, ev) -> None:
    t, s = ev.timing or Timing(), m.vars
    parts = (t.admission_wait_s, t.load_s, t.render_s, t.tokenize_s, t.prefill_s, t.decode_s)
    s.total_duration, s.load_duration = sum(_ns(p) for p in parts), _ns(t.load_s)
    s.prompt_eval_duration, s.eval_duration = _ns(t.prefill_s), _ns(t.decode_s)


def on_call_started(m: Machine, ev) -> None:
    m.vars.call_id, m.vars.call_name, m.vars.called = ev.call_id, ev.name, True


def on_text(m: Machine, ev) -> None:
    m.vars.text()
    m.vars.logprobs = token_logprobs(ev, bare=True) or None  # its tokens as Ollama's Logprob, empty lists left out


def on_call_done(m: Machine, ev) -> None:
    """Ollama's arguments are a JSON object: arguments that are not one (cut short, or not JSON) are sent as
    ``{}`` (and logged), as the fold and the stream both say."""
    m.vars.call_arguments = arguments_object(ev.arguments, m.vars.call_name, complete=ev.complete)


def fold_ollama(wire: list[WireEvent], body: dict) -> dict:
    """Lines → the one object ``stream: false`` answers: the last line, with the text of all of them."""
    text: list[str] = []
    thinking: list[str] = []
    calls: list[dict] = []
    logprobs: list[dict] = []
    last: dict = {}
    for w in wire:
        d = w.data
        if "error" in d:
            raise ApiError("server_error", d["error"])
        logprobs += d.get("logprobs") or []
        part = d.get("message", d)
        text.append(part.get("content", part.get("response", "")) or "")
        thinking.append(part.get("thinking") or "")
        calls.extend(part.get("tool_calls") or [])
        last = d
    out = {**last, **({"logprobs": logprobs} if logprobs else {})}  # every line's tokens, in order
    reply: dict[str, Any] = {"content": "".join(text)} if "message" in last else {"response": "".join(text)}
    if any(thinking):
        reply["thinking"] = "".join(thinking)
    if "message" in last:
        out["message"] = {"role": "assistant", **reply, **({"tool_calls": calls} if calls else {})}
    else:
        out.update(reply)
    return out
