"""OpenAI Responses: the Python its table (spec/openai_responses.yaml) cannot say — input items, tool
flattening hooks, storage and the routes that are not generation (the machine's bookkeeping and the fold are
in responses_machine.py).

Rules:
- The non-stream answer is the ``response`` inside the last event the machine emitted
  (``response.completed`` / ``.incomplete`` / ``.failed``): stream and non-stream cannot disagree.
  A failed generation answers 200 with ``status: "failed"`` and the error inside, as the stream's last
  event does (no retry loop on a deterministic failure).
- The response object's ``output`` is a projection of the events: the items of its
  ``response.output_item.done`` events, in order.
- ``store`` (default true) keeps a finished response (a failed one as sent, an unexpected error's included:
  base.sse_body records it before ``response.failed`` leaves): its input items plus its event log
  (tinytitan/store/responses_store.py: a database, read and written off the event loop). A store that
  fails (a full disk) is logged and the answer still goes out. ``previous_response_id`` replays the chain's
  input and output before this request's input; ``instructions`` are never carried over (as in the API). An
  input item (or item_reference) whose id the chain already holds is refused (400 ``duplicate_item``), as
  the API does. A chain whose response is not stored (never, deleted, evicted) is the API's own 400
  ``previous_response_not_found`` naming it.
- A ``compaction_trigger`` input item turns the request into a compaction turn: the conversation is
  summarised (tinytitan/protocols/compaction.py) and the response has one ``compaction`` output item. It is
  stored as any response is; chained from, its item supersedes the conversation it summarised (responses_stored.
  chained). ``/v1/responses/compact`` (responses_compact.py) stores nothing.
- Over a WebSocket (responses_socket.py) a turn also keeps its response in the connection's own cache (even
  with ``store: false``), which ``previous_response_id`` reads before the store; its events go out one per
  frame. A prewarm (``generate: false``) is the lifecycle events of an empty response: nothing is decoded.
- ``context_management`` (server-side compaction): past its threshold the older turns are summarised on the
  way (``compacted_turn``; compaction.py), the ``compaction`` item first in the output, then the reply.
- ``truncation: "auto"`` drops the oldest turns until the prompt fits (truncation.py).
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from dataclasses import dataclass, field
from types import SimpleNamespace

from .. import tool_choice
from ..chat_request import ChatRequest
from ..errors import ApiError, invalid
from ..observe.turn import watch
from ..speclang.load import compile_spec
from ..speclang.machine import Machine
from ..speclang.validate import RequestValidator, Validated
from ..store.db import storage_errors
from ..store.responses_store import ResponsesStore, StoredResponse
from ..events import Finished, Started, ToolCallDone, Usage
from . import compaction, responses_socket, truncation
from .base import Protocol
from .common import in_call_order, place_system, verbosity_note
from .responses_input import SEARCH_TOOL, loaded_tools, parse_tools, searches_in_client, to_messages
from .responses_machine import ABANDONED, ECHOED_SAMPLING, HOOKS, ResponsesState, fold_last_response
from .responses_socket import LocalResponses
from .wire import Call, Connection, Reply, Services
from .responses_fields import (
    LOGPROBS,
    rule_logprobs,
    hook_input,
    hook_prompt_cache_options,
    hook_text,
    hook_tool_choice,
    prompt_cache_diagnostics,
)
from .responses_compact import SummaryRoutes, places, summary_transcript
from .responses_stored import StoredResponses

STORE_KEY = "responses_store"
SERVED_TIER = {"auto": "default", "fast": "priority"}  # a request's service_tier → the one a Response reports
log = logging.getLogger("tinytitan.responses")


# -- request hooks ------------------------------------------------------------------------------------------
@dataclass
class ResponsesRequest:
    """What a request's hooks and handler found (``Validated.state``)."""

    items: list[dict] = field(default_factory=list)  # the checked input items, each with an id
    tool_names: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # flat name → (namespace, name)
    own_input: list[dict] = field(default_factory=list)  # this request's items, references resolved (stored)
    local: "LocalResponses | None" = None  # a WebSocket connection's own responses (responses_socket.py)
    framing: str | None = None  # how the stream is written: the spec's (SSE), or ``websocket``
    history: list[dict] = field(default_factory=list)  # the items ``previous_response_id`` brought in
    search_tool: str | None = None  # the client-executed tool search's function, where the tools offer one


# -- the protocol -------------------------------------------------------------------------------------------
class OpenAIResponses(StoredResponses, SummaryRoutes, Protocol):
    name = "openai_responses"
    id_prefix = "resp_"

    def __init__(self, spec_directory=None):
        super().__init__(spec_directory)
        # the compact route's table is checked like any request table (meta-schema and cross-references)
        compact_spec = compile_spec({"protocol": f"{self.name}.compact", "errors": self.spec.raw["errors"],
                                     "request": self.spec.extra["compact_request"]},
                                    f"{self.spec.source} (extra.compact_request)")
        self.compact_validator = RequestValidator(compact_spec, {})
        trace_spec = compile_spec({"protocol": f"{self.name}.trace_summarize", "errors": self.spec.raw["errors"],
                                   "request": self.spec.extra["trace_summarize_request"]},
                                  f"{self.spec.source} (extra.trace_summarize_request)")
        self.trace_validator = RequestValidator(trace_spec, {})

    def request_hooks(self):
        return {"input": hook_input, "tools": self.hook_tools,
                "tool_choice": hook_tool_choice, "text": hook_text, "prompt_cache_options": hook_prompt_cache_options,
                "logprobs": rule_logprobs}

    @property
    def separator(self) -> str:
        return self.spec.extra.get("namespace_separator", "__")

    def hook_tools(self, value, body: dict, args: dict, v: Validated) -> None:
        tools, names = parse_tools(value, self.separator)
        args["tools"] = tools
        v.state.tool_names = names
        v.state.search_tool = SEARCH_TOOL if searches_in_client(value) else None

    def request_state(self) -> ResponsesRequest:
        return ResponsesRequest()

    def machine_hooks(self):
        return dict(HOOKS)

    def machine_state(self) -> ResponsesState:
        return ResponsesState()

    def folds(self):
        return {"last_response": fold_last_response}

    def handlers(self):
        return {"generate": self.generate, "compact": self.compact, "input_tokens": self.input_tokens,
                "retrieve": self.retrieve, "delete": self.delete, "cancel": self.cancel, "input_items": self.input_items,
                "socket": self.socket, "trace_summarize": self.trace_summarize}

    # -- storage ---------------------------------------------------------------------------------------------
    def attach(self, services: Services) -> None:
        super().attach(services)
        self.store()  # load (and check) the log at start, not on the first request

    def store(self) -> ResponsesStore:
        state = self.services.state
        store = state.get(STORE_KEY)
        if store is None:
            config = self.services.config
            store = state[STORE_KEY] = ResponsesStore.open(
                config.responses_store, config.responses_retention_days * 86400,
                config.responses_max_mib * 2 ** 20)
        return store

    async def conversation(self, body: dict, items: list[dict],
                           local: "LocalResponses | None" = None) -> tuple[list[dict], list[dict]]:
        own = await self.resolve(items)
        history = await self.history(body.get("previous_response_id"), local)
        chained = {item.get("id") for item in history} - {None}
        seen: set[str] = set()
        for i, item in enumerate(own):  # as the API: the chain already holds it, a second copy is refused
            if item.get("id") in chained:
                raise invalid(f"Duplicate item found with id {item['id']}: the previous_response_id chain already "
                              "holds it. Remove duplicate items from your input and try again.",
                              param=f"input[{i}]", code="duplicate_item")
            if item.get("id") in seen:  # …and so is a second copy in the input itself (input_items pages by id)
                raise invalid(f"Duplicate item found with id {item['id']}. Remove duplicate items from your input "
                              "and try again.", param=f"input[{i}]", code="duplicate_item")
            if item.get("id") is not None:
                seen.add(item["id"])
        if not own and not history:
            raise invalid("Missing required parameter: 'input'", param="input", code="missing_required_parameter")
        return history, own

    async def record(self, v: Validated, machine: Machine) -> None:
        if v.state is None or not (v.body.get("store") or v.state.local is not None):
            return
        # (a compaction turn's trigger is no item a listing holds: what it asked for is the output's compaction item)
        own = [item for item in v.state.own_input if item.get("type") != "compaction_trigger"]
        rec = StoredResponse(id=machine.context["id"], input=own,
                             events=[w.data for w in machine.history],
                             previous_response_id=v.body.get("previous_response_id"),
                             created_at=machine.context["created"])
        if v.state.local is not None:  # kept whole (its chain flattened): an evicted ancestor breaks nothing
            v.state.local.put(StoredResponse(id=rec.id, input=v.state.history + rec.input, events=rec.events,
                                             previous_response_id=None, created_at=rec.created_at))
        if not v.body.get("store"):
            return
        try:
            prev = rec.previous_response_id
            if prev and v.state.local is not None and v.state.local.get(prev) is not None \
                    and await self.store().get(prev) is None:
                # chained from a response only this connection holds (store: false): stored with the whole
                # conversation, so the chain outlives the connection (over HTTP, on another socket)
                rec = StoredResponse(id=rec.id, input=v.state.history + rec.input, events=rec.events,
                                     previous_response_id=None, created_at=rec.created_at)
            await self.store().put(rec)
        except (*storage_errors(), ValueError, ApiError) as exc:  # a full or read-only disk, a lost database server
            # (or text it cannot encode; or the read of ``prev``, its 503) loses the record, not the answer
            log.error("could not store response %s: %s", rec.id, exc)

    def abandon(self, machine: Machine) -> None:
        """A stream cut short once its id went out (the client gone, the server stopping): its machine ends as
        an ``incomplete`` response, what was generated so far its output (an item cut mid-way ``incomplete``),
        so ``record`` keeps it where the request stores, and retrieving it or chaining from it works, as for
        any response (Codex and the Agents SDK chain turns by the id ``response.created`` gave them)."""
        if not machine.history:  # nothing was sent: no client knows its id
            return  # (a summary cut mid-way is left out of the output: responses_machine.close)
        if "ToolCallDone" in machine.allowed():  # the call it was writing, cut short
            machine.feed(ToolCallDone(0, complete=False))
        if "spent" in machine.context:  # a compaction turn: what its summary passes spent, as its Finished counts
            usage = machine.context["spent"]()
        else:
            prompt, cached = machine.context.get("started", (machine.context.get("prompt_tokens") or 0, 0))
            completion, reasoning = machine.context.get("decoded", lambda: (0, 0))()
            usage = Usage(prompt, cached, completion, reasoning)
        machine.feed(Finished(ABANDONED, usage))

    # -- the machine -----------------------------------------------------------------------------------------
    def extra_context(self, v: Validated) -> dict:
        # the values the request names until Started says what the engine decodes with (the ``sampling`` hook)
        return {**{name: v.body.get(name) for name in ECHOED_SAMPLING}, "tool_names": (v.state or ResponsesRequest()).tool_names,
                "custom_tools": sorted(t.name for t in v.args.get("tools", ()) if t.custom),
                "search_tool": (v.state or ResponsesRequest()).search_tool,
                "tool_choice": tool_choice.responses_spelling(v.body.get("tool_choice") or "auto"),
                # the tier that served it, as the API reports it: 'auto' is the project's default, 'fast' is priority
                "service_tier": SERVED_TIER.get(v.body.get("service_tier"), v.body.get("service_tier")) or "default",
                # reasoning items carry their thought as encrypted_content where the request includes it (so a
                # client that stores nothing can send it back: responses_input.reasoning_payload)
                "reasoning_encrypted": "reasoning.encrypted_content" in (v.body.get("include") or ()),
                "logprobs": LOGPROBS in (v.body.get("include") or ()),  # output_text parts carry their tokens' figures
                # (older SDKs spell it "in-memory"; the Response holds "in_memory")
                "prompt_cache_retention": {"in-memory": "in_memory"}.get(v.body.get("prompt_cache_retention"),
                                                                         v.body.get("prompt_cache_retention"))}

    def machine(self, v, model_id, stream, entry=None) -> Machine:
        m = super().machine(v, model_id, stream, entry)
        m.context["output"] = lambda: [w.data["item"] for w in m.history if w.event == "response.output_item.done"]
        options = v.body.get("prompt_cache_options")
        m.context["prompt_cache_options"] = None if options is None else {
            "mode": options.get("mode", "implicit"), "ttl": options.get("ttl", "30m"),
            "comparison_response_id": options.get("comparison_response_id")}
        compared = (options or {}).get("comparison_response_id") is not None
        m.context["prompt_cache_diagnostics"] = \
            lambda: prompt_cache_diagnostics(m.context.get("cache_compared")) if compared else None
        return m

    # -- handlers --------------------------------------------------------------------------------------------
    async def generate(self, call: Call, local: "LocalResponses | None" = None, framing: str | None = None,
                       prewarm: bool = False) -> Reply:
        """POST /v1/responses, or one ``response.create`` of a WebSocket (``local``: its connection's responses;
        ``framing``: ``websocket``; ``prewarm``: ``generate: false``)."""
        v = await self.checked(call)
        v.state.local, v.state.framing = local, framing
        history, own = await self.conversation(v.body, v.state.items, local)
        v.state.own_input, v.state.history = own, history
        if any(item.get("type") == "compaction_trigger" for item in own):
            return await self.compaction_turn(v, history + own)
        items = history + own
        threshold = self.compact_threshold(v.body, v.body["model"])
        items = compaction.superseded(items, managed=threshold is not None)
        req = self.request_for(v, items)
        if prewarm or (v.body.get("prompt_cache_options") or {}).get("prewarm") is True:
            return await self.prewarmed(v, req.model)
        if threshold is not None:
            split = compaction.split_for_compaction(items)
            if split is not None and await self.prompt_tokens(req) > threshold:
                return await self.compacted_turn(v, *split)
        if v.body.get("truncation") == "auto":
            req = await truncation.fit(req, self.engine.model_info(req.model)["context_window"],
                                       self.engine.count_tokens)
        return await self.respond(v, req, framing=framing)

    async def input_tokens(self, call: Call) -> Reply:
        """POST /v1/responses/input_tokens: the input tokens of the prompt a response would read (the chain of
        ``previous_response_id`` included)."""
        v = await self.checked(call, "input_tokens")
        history, own = await self.conversation(v.body, v.state.items, None)
        req = self.request_for(v, compaction.superseded(history + own, managed=False))  # as generate reads them
        if v.body.get("truncation") == "auto":  # …and as it fits them to the window
            req = await truncation.fit(req, self.engine.model_info(req.model)["context_window"],
                                       self.engine.count_tokens)
        return Reply({"object": "response.input_tokens", "input_tokens": await self.engine.count_tokens(req)})

    def request_for(self, v: Validated, items: list[dict]) -> ChatRequest:
        system, msgs = to_messages(items, self.separator, places(v.state.items))
        loaded, names = loaded_tools(items, self.separator)  # what tool_search_output items loaded: callable now
        offered = {t.name for t in v.args.get("tools", ())}
        if loaded:
            v.args["tools"] = list(v.args.get("tools", ())) + [t for t in loaded if t.name not in offered]
            v.state.tool_names = {**names, **v.state.tool_names}
        instructions = v.body.get("instructions") or ""
        verbosity = (v.body.get("text") or {}).get("verbosity")
        v.args["messages"] = place_system([instructions], in_call_order(msgs), merge_later=True)
        # compaction summaries, then the verbosity sentence, close the system prompt (the model's own where the
        # request has none: ChatRequest.system_note)
        v.args["system_note"] = "\n\n".join(t for t in (*system, verbosity_note(verbosity)) if t)
        if not v.args["messages"] and not system:
            raise invalid("The input has nothing the model can read (no messages, function calls or outputs, and "
                          "no instructions)", param="input", code="empty_input")
        return self.engine.apply_model(self.chat_request(v))

    def compact_threshold(self, body: dict, model: str) -> int | None:
        """The input tokens past which ``context_management`` compacts (its default: the context window);
        None without a compaction entry."""
        entries = [e for e in body.get("context_management") or [] if e.get("type") == "compaction"]
        if not entries:
            return None
        given = [e["compact_threshold"] for e in entries if e.get("compact_threshold") is not None]
        return min(given) if given else self.engine.model_info(model)["context_window"]

    async def prompt_tokens(self, req: ChatRequest) -> int:
        try:
            return await self.engine.count_tokens(req)
        except ApiError as exc:  # a backend that cannot count has no threshold to pass
            if exc.code != "not_implemented":
                raise
            return 0

    async def compacted_turn(self, v: Validated, standing: list[dict], older: list[dict],
                             newest: list[dict]) -> Reply:
        """context_management past its threshold: the older turns summarised into a compaction item (output
        first), and the reply generated from the standing prompt, that summary and the newest turn."""
        model_id, _ = self.engine.resolve(v.body["model"])
        compactor = self.engine.summariser(v.body["model"])
        text = summary_transcript(compactor, older, v.state.items)
        stream = bool(v.body.get("stream"))
        machine = self.machine(v, model_id, stream, entry="compacted")
        # the item carries the newest turn, left out of its summary, and the tools searches loaded (compaction.py)
        result: dict = {"kept": newest, "loaded": compaction.searches(older)}
        machine.context["compaction"] = result
        keepalive = self.spec.extra.get("keepalive_seconds")

        def reply(summary: str):
            item = {"type": "compaction", "encrypted_content": compaction.encode(
                summary, result.get("mode", "model"), model_id, kept=newest, loaded=result["loaded"])}
            req = self.request_for(v, standing + [item] + result["loaded"] + newest)  # (as a later turn reads them)
            log.info("context_management: %d older item(s) compacted before the reply", len(older))
            return self.engine.session(req, keepalive, streamed=stream)

        events = aclosing(compaction.compacted_events(compactor, text, result, reply))
        source = await self.services.hold(events) if stream else events
        if stream:
            return await self.answer(v, machine, watch(source, SimpleNamespace(model=model_id), stream),
                                     v.state.framing)
        async with source as evs:
            return await self.answer(v, machine, watch(evs, SimpleNamespace(model=model_id), stream))

    async def prewarmed(self, v: Validated, model_id: str) -> Reply:
        """A prewarm's answer: the lifecycle events of a response with no output, and nothing decoded (a
        request that did not ask for a stream gets the fold: the empty response object). Its id is kept like
        any response's, so the next turn can chain from it with only its new input."""
        machine = self.machine(v, model_id, bool(v.body.get("stream")))
        machine.context.setdefault("prompt_tokens", 0)

        async def events():
            yield Started(0)
            yield Finished("stop", Usage())

        return await self.answer(v, machine, events(), v.state.framing)

    async def socket(self, call: Call, conn: Connection) -> None:
        await responses_socket.serve(self, call, conn)

    async def compaction_turn(self, v: Validated, items: list[dict]) -> Reply:
        model_id, _ = self.engine.resolve(v.body["model"])
        compactor = self.engine.summariser(v.body["model"])
        machine = self.machine(v, model_id, bool(v.body.get("stream")), entry="compaction")
        items = [i for i in items if i.get("type") != "compaction_trigger"]
        result: dict = {"loaded": compaction.searches(items)}  # (the summary is of every item: the item keeps none)
        machine.context["compaction"] = result
        machine.context["temperature"] = 0.0  # the value actually used (a summary is not sampled)
        machine.context["spent"] = lambda: compactor.spent  # (the usage of a stream cut short: ``abandon``)
        text = summary_transcript(compactor, items, v.state.items)  # (refused before the stream opens)
        # the summary passes run in engine sessions of their own; the event source is the HTTP request's
        events = await self.services.hold(aclosing(compaction.compaction_events(compactor, text, result)))
        stream = bool(v.body.get("stream"))
        return await self.answer(v, machine, watch(events, SimpleNamespace(model=model_id), stream), v.state.framing)
