"""The Responses machine's bookkeeping (the ``do:`` hooks of spec/openai_responses.yaml) and its fold.

Rules:
- ``vars.item`` is the output item a transition opens: ``kind``, ``index`` (its output_index, 0, 1, 2 …),
  ``id`` (``rs_`` / ``msg_`` / ``fc_`` / ``ctc_`` / ``tsc_`` / ``cmp_`` + hex), ``text`` (the reasoning, the
  message text or the call's arguments so far), and for calls ``call_id``, ``name`` and ``namespace`` (the
  flattened name mapped back); ``search`` marks a client-executed tool search's call (its ``arguments`` object
  set at close).
- ``close`` copies it to ``vars.closed`` with its ``status``: ``incomplete`` when a failure or the output
  cap ended it (a call whose arguments were cut short included), else ``completed``. A call's text becomes ToolCallDone's
  complete arguments; a compaction's summary becomes its ``encrypted_content`` (``made``: the summary was finished,
  else the item is never done, as a summary cut mid-way, failed or abandoned); a reasoning item gets its
  ``summary`` (its text as one ``summary_text`` part where ``reasoning.summary`` asked for one, else none).
- ``finish`` decides completed vs incomplete (the output cap, or ``ABANDONED``); the fold is the ``response`` of the
  last event.
- ``ABANDONED`` is a Finished reason the engine never sends: the protocol feeds it to a stream cut short (its client
  gone, the server stopping; ``OpenAIResponses.abandon``), so what was sent so far ends as an incomplete response.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import custom_tools
from ..errors import ApiError
from ..events import Failed, Finished, ToolCallDone
from ..speclang.machine import Machine, WireEvent
from ..speclang.json_text import strict_loads
from . import compaction
from .base import new_id
from .common import reasoning_payload, token_logprobs


ABANDONED = "abandoned"  # (incomplete_details.reason: null, as the spec's incomplete_reason maps it)
CUT_SHORT = ("length", ABANDONED)  # the Finished reasons of an incomplete response


@dataclass
class ResponsesState:
    """A Responses stream's bookkeeping (``vars`` in spec/openai_responses.yaml)."""

    next_index: int = 0  # the output_index the next item gets
    item: dict | None = None  # the output item open now (see the rules above)
    closed: dict | None = None  # the item a transition just closed, with its status
    completed: bool = False
    incomplete: bool = False
    completed_at: int | None = None


def _open(m: Machine, kind: str, prefix: str, **fields) -> dict:
    index = m.vars.next_index
    m.vars.next_index = index + 1
    m.vars.item = item = {"kind": kind, "index": index, "id": new_id(prefix), "text": "", **fields}
    return item


def open_reasoning(m: Machine, ev) -> None:
    _open(m, "reasoning", "rs_")["text"] = ev.text


def open_message(m: Machine, ev) -> None:
    item = _open(m, "message", "msg_", logprobs=[], delta_logprobs=[], done_logprobs=[])
    item["text"] = ev.text
    _logprobs(m, item, ev)


def _logprobs(m: Machine, item: dict, ev) -> None:
    """Where the request includes them: the delta's tokens' log probabilities (the delta and done events' shape:
    no bytes), and the part's list so far (``ResponseOutputText.Logprob``: with bytes)."""
    if not m.context.get("logprobs"):
        return
    tokens = token_logprobs(ev)
    item["logprobs"] = item["logprobs"] + tokens
    item["delta_logprobs"] = [_unbytes(t) for t in tokens]


def _unbytes(token: dict) -> dict:
    return {"token": token["token"], "logprob": token["logprob"],
            "top_logprobs": [{"token": t["token"], "logprob": t["logprob"]} for t in token["top_logprobs"]]}


def open_call(m: Machine, ev) -> None:
    """A function call, or a custom tool call (``custom``: its input streams, read out of the arguments)."""
    names = m.context.get("tool_names") or {}
    namespace, name = names.get(ev.name, (ev.namespace, ev.name))
    if ev.name in (m.context.get("custom_tools") or ()):
        _open(m, "custom_tool_call", "ctc_", call_id=ev.call_id, name=name, namespace=namespace, custom=True,
              function=False, input="", input_delta=None, search=False)
    elif ev.name == m.context.get("search_tool"):  # a client-executed tool search: a tool_search_call item
        _open(m, "tool_search_call", "tsc_", call_id=ev.call_id, name=name, search=True, function=False,
              custom=False, input_delta=None)
    else:
        _open(m, "function_call", "fc_", call_id=ev.call_id, name=name, namespace=namespace, function=True,
              custom=False, input_delta=None, search=False)


def sampling(m: Machine, ev) -> None:
    """The response object echoes the sampling values the engine decodes with (``Started.sampling``), and the
    reasoning effort it used where the engine overrode the request's (structured output turns it off)."""
    m.context["started"] = (ev.prompt_tokens, ev.cached_tokens)  # (the usage of a stream cut short)
    for name in ECHOED_SAMPLING:
        if name in ev.sampling:
            m.context[name] = ev.sampling[name]
    if "reasoning" in ev.sampling:
        m.context["reasoning_effort"] = ev.sampling["reasoning"]


ECHOED_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


def open_compaction(m: Machine, ev) -> None:
    _open(m, "compaction", "cmp_")


def append(m: Machine, ev) -> None:
    item = m.vars.item
    item["text"] += ev.text
    if item["kind"] == "message":
        _logprobs(m, item, ev)
    if item.get("custom"):
        now = custom_tools.input_of(item["text"])
        item["input_delta"], item["input"] = custom_tools.input_delta(item["input"], now), now


def close(m: Machine, ev) -> None:
    item = dict(m.vars.item)
    cut = (isinstance(ev, Failed) or (isinstance(ev, Finished) and ev.reason in CUT_SHORT)
           or (isinstance(ev, ToolCallDone) and not ev.complete))
    item["status"] = "incomplete" if cut else "completed"
    if item["kind"] == "message":  # the done event's list: every token of the part, as the deltas gave them
        item["done_logprobs"] = [_unbytes(t) for t in item["logprobs"]]
    if isinstance(ev, ToolCallDone) and ev.arguments:
        item["text"] = ev.arguments
    if item.get("custom"):  # its input once whole: what a reading in flight held back goes out as a last delta
        final = custom_tools.input_of(item["text"], done=True)
        m.vars.item["input_delta"], item["input"] = custom_tools.input_delta(item["input"], final), final
    if item["kind"] == "reasoning":  # its summary, where one was asked: the thought text (the spec's summary_*)
        item["summary"] = [{"type": "summary_text", "text": item["text"]}] if m.context.get("reasoning_summary") else []
        item["encrypted_content"] = reasoning_payload(item["text"]) if m.context.get("reasoning_encrypted") else None
    if item.get("search"):
        try:
            arguments = strict_loads(item["text"]) if item["text"].strip() else {}
        except ValueError:
            arguments = None
        item["arguments"] = arguments if isinstance(arguments, dict) else {}
    if item["kind"] == "compaction":
        made = m.context.get("compaction") or {}
        item["made"] = "mode" in made  # (the summary was finished: its pass says how it made it)
        item["encrypted_content"] = compaction.encode(item["text"], made.get("mode", "model"), m.context["model"],
                                                      kept=made.get("kept"), loaded=made.get("loaded"))
    m.vars.closed = item


def finish(m: Machine, ev: Finished) -> None:
    m.vars.completed = ev.reason not in CUT_SHORT
    m.vars.incomplete = ev.reason in CUT_SHORT
    m.vars.completed_at = int(time.time())


def fold_last_response(wire: list[WireEvent], body: dict) -> dict:
    for w in reversed(wire):
        if isinstance(w.data, dict) and isinstance(w.data.get("response"), dict):
            return w.data["response"]
    raise ApiError("server_error", "the response ended without a final event")


HOOKS = {"sampling": sampling, "open_reasoning": open_reasoning, "open_message": open_message, "open_call": open_call,
         "open_compaction": open_compaction, "append": append, "close": close, "finish": finish}
