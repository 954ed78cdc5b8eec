"""What every protocol shares: spec loading, validation into a ChatRequest, the machine, the fold,
the error envelope and the generic generation handler.

A protocol module subclasses ``Protocol`` and supplies only hooks: request hooks (message shapes),
machine hooks (bookkeeping), the fold, and handlers for routes that are not plain generation.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from contextlib import aclosing
from pathlib import Path
from typing import Any, AsyncIterable, AsyncIterator, Callable

import trio

from ..chat_request import ChatRequest
from ..errors import ApiError
from ..events import Failed, TokenEvent
from ..observe.turn import asked, failed, watch
from ..speclang import ProtocolSpec, load_protocol
from ..speclang import template
from ..speclang.load import BUILTIN_ROOTS
from ..speclang.machine import Machine, WireEvent, pump
from ..speclang.validate import RequestValidator, Validated
from .choices import Choice, respond_choices
from .failure import refusal_or_failure
from .wire import Call, Reply, Services

log = logging.getLogger("tinytitan.protocol")

# a body this large is parsed and validated on a worker thread: a 30 MB prompt takes a second of CPU there, and
# several at once would otherwise hold every other request (a small one is cheaper inline than a thread hop)
OFF_LOOP_BYTES = 1 << 20
# the most a stream cut short spends keeping what it sent (``abandon``, then ``record``), shielded from the
# cancellation that cut it: a store that never answers (a PostgreSQL server gone silent) would otherwise hold the
# handler, and the engine place its request holds, for ever. A healthy store writes a response in milliseconds;
# a few seconds also rides out a busy disk or a short lock.
CUT_RECORD_SECONDS = 5.0


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class Protocol:
    name: str = ""
    id_prefix: str = "id-"
    stream_field: str = "stream"

    services: Services  # set by ``attach``, when a server is built with this protocol

    def __init__(self, spec_directory: Path | None = None):
        self.spec: ProtocolSpec = load_protocol(self.name, spec_directory)
        self.validator = RequestValidator(self.spec, self.request_hooks(), state=self.request_state)
        # a route whose spec entry changes request fields (``routes[].fields``) validates with its own table
        self.route_validators = {r["handler"]: RequestValidator(self.spec, self.request_hooks(), r.get("fields"),
                                                                self._route_without(r), self.request_state)
                                 for r in self.spec.routes if r.get("fields") or r.get("without") or r.get("only")}
        self.spec.check_provided("route handlers", (r["handler"] for r in self.spec.routes), self.handlers())
        states = (self.spec.stream or {}).get("states", {})
        named = {h for table in states.values() for row in table.values() for h in row.get("do", [])}
        self.spec.check_provided("machine hooks", named, self.machine_hooks())
        state = self.machine_state()
        if dataclasses.is_dataclass(state):  # every $vars.<name> the templates use is a field of the state
            fields = {f.name for f in dataclasses.fields(state)}
            unknown = sorted(self.spec.vars_used - fields)  # the templates as read at load, not walked again
            if unknown:
                raise ValueError(f"{self.spec.source}: templates use vars {unknown}, which {type(state).__name__} "
                                 f"does not have")
        # what ``extra_context`` may supply: the names a template may use (the spec's own, checked at load)
        self.context_names = BUILTIN_ROOTS | set(self.spec.context) | set(self.spec.computed)
        self._context_checked = False  # the module's extra_context agrees with the spec (``machine``, once)

    def _route_without(self, route: dict) -> tuple[str, ...]:
        declared = self.spec.request.get("fields") or {}
        if route.get("only") is not None:
            return tuple(name for name in declared if name not in route["only"])
        return tuple(route.get("without") or ())

    # -- what subclasses supply ------------------------------------------------------------------------------
    def request_hooks(self) -> dict[str, Callable]:
        return {}

    def request_state(self) -> Any:
        """A fresh record for what one request's hooks found (``Validated.state``), or None."""
        return None

    def machine_hooks(self) -> dict[str, Callable]:
        return {}

    def machine_state(self) -> Any:
        """A fresh bookkeeping object for one machine (``vars`` in the spec's templates). A protocol with
        bookkeeping returns a dataclass: its fields are the names ``$vars.…`` may use, checked at start."""
        return None

    def folds(self) -> dict[str, Callable[[list[WireEvent], dict], Any]]:
        return {}

    def handlers(self) -> dict[str, Callable]:
        return {"generate": self.generate}

    def extra_context(self, v: Validated) -> dict:
        return {}

    def attach(self, services: Services) -> None:
        """Called once when a server is built with this protocol; a protocol that keeps something per server
        (e.g. a store) opens it here."""
        self.services = services

    @property
    def engine(self):
        return self.services.engine

    async def record(self, v: Validated, machine: Machine) -> None:
        """Called once a response's machine reached its final state (stream or not): a protocol that keeps
        finished responses stores them here. A stream cut short gets here once ``abandon`` ended its machine."""

    def abandon(self, machine: Machine) -> None:
        """A stream cut short before its machine's last event (the client gone, the server stopping): a protocol
        that keeps responses ends the machine here, so ``record`` keeps what was sent so far. By default the
        machine is left as it is, and nothing is recorded."""

    # -- errors --------------------------------------------------------------------------------------------
    def error_response(self, err: ApiError, request_id: str | None = None) -> tuple[int, dict]:
        """A prompt over the context window is said in the API's own words (``extra.prompt_too_long``, with
        ``{tokens}``, ``{window}`` and the engine's ``{message}``; ``extra.prompt_fills_window`` for a prompt that
        fills it exactly, with ``{largest}``, the longest prompt that fits, and ``{needed}``, the prompt and one
        answer token): clients match that wording to compact, reading the numbers in it. So is
        an error whose code ``extra.error_wording`` names (a template over ``{message}``, the error's data and
        ``wording_data``; or a table of them keyed by the data's ``check``, the keyword that failed)."""
        wording = self.spec.extra.get("prompt_too_long")
        if err.code == "context_length_exceeded" and wording and {"prompt_tokens", "context_window"} <= set(err.data):
            tokens, window = err.data["prompt_tokens"], err.data["context_window"]
            if tokens == window:  # it fits, but leaves no room for the answer's first token: said so, not "N > N"
                wording = self.spec.extra.get("prompt_fills_window", wording)
            text = wording.format(message=err.message, tokens=tokens, window=window, largest=window - 1,
                                  needed=tokens + 1)
            err = ApiError(err.kind, text, err.param, err.code, err.headers, err.data)
        reworded = (self.spec.extra.get("error_wording") or {}).get(err.code)
        if isinstance(reworded, dict):  # one code, several checks (an enum's, a pattern's …): the check's wording
            reworded = reworded.get(err.data.get("check"))
        if reworded:  # an error the engine raises with data (images a model cannot read …): the API's own words
            try:
                text = reworded.format_map({**self.wording_data(err), **err.data, "message": err.message})
            except (KeyError, IndexError, ValueError):  # data the wording needs is missing: the message as it is
                text = err.message
            err = ApiError(err.kind, text, err.param, err.code, err.headers, err.data)
        kind = self.spec.error_kind(err.kind)
        param = self.spec.error_params.get(err.param, err.param)  # the engine names ChatRequest's fields
        ctx = {"message": err.message, "type": kind.type, "param": param, "code": err.code or kind.code,
               "details": err.data.get("details"),  # a machine-readable reason, where the envelope has one
               "request_id": request_id}  # (the request-id header's, where the envelope carries it)
        return kind.status, template.render(self.spec.error_envelope, ctx)

    def wording_data(self, err: ApiError) -> dict:
        """Values an ``extra.error_wording`` template may use beyond ``{message}`` and the error's data (which
        win over these): a protocol that spells the part an error names its API's way adds ``{place}`` here."""
        return {}

    # -- the request path ----------------------------------------------------------------------------------
    def validate(self, call: Call | bytes, handler: str | None = None, empty_is_object: bool = False) -> Validated:
        """A call's body through the request table (a route's own, where it has one). The call's headers
        reach hooks whose rules depend on one (``v.headers``); raw bytes validate without them."""
        validator = self.route_validators.get(handler, self.validator)
        raw = call.body if isinstance(call, Call) else call
        body = {} if empty_is_object and not raw.strip() else validator.parse_json(raw)
        return validator.validate(body, dict(call.headers) if isinstance(call, Call) else {})

    async def checked(self, call: Call, handler: str | None = None, empty_is_object: bool = False) -> Validated:
        """``validate`` for a handler: a body of ``OFF_LOOP_BYTES`` or more is parsed and validated on a worker
        thread, so big prompts do not delay the small requests beside them. The same errors come out. Where the
        server fetches remote images (``--fetch-images``), those at the spec's ``extra.image_urls`` are fetched
        first and stand in the body as data URLs."""
        call = await self.fetched(call)
        if len(call.body) < OFF_LOOP_BYTES:
            return self.validate(call, handler, empty_is_object)
        return await trio.to_thread.run_sync(self.validate, call, handler, empty_is_object)

    async def fetched(self, call: Call, paths: list[str] | None = None) -> Call:
        """``call`` with the remote images at ``paths`` (the spec's ``extra.image_urls`` unless given) fetched,
        where the server fetches them (``--fetch-images``); else as it came (a remote URL is then refused by name
        where it is read)."""
        fetch = getattr(getattr(self, "services", None), "fetch_images", None)
        paths = self.spec.extra.get("image_urls") if paths is None else paths
        if fetch is not None and paths:
            return await fetch(call, paths)
        return call

    def chat_request(self, v: Validated) -> ChatRequest:
        args = dict(v.args)
        args["messages"] = tuple(args.get("messages", ()))
        args["tools"] = tuple(args.get("tools", ()))
        args["stop"] = tuple(args.get("stop", ()))
        args["workspace"] = v.headers.get("x-tinytitan-workspace")
        return ChatRequest(**args)

    def machine(self, v: Validated, model_id: str, stream: bool, entry: str | None = None) -> Machine:
        ctx: dict[str, Any] = {"req": v.body, "id": new_id(self.id_prefix), "created": int(time.time()),
                               "model": model_id}
        extra = self.extra_context(v)
        if not self._context_checked:  # which names it supplies is the module's code: checked on first use
            undeclared = sorted(set(extra) - self.context_names)
            if undeclared:  # a template may use only what the spec says exists (checked at load)
                raise ValueError(f"{self.spec.source}: extra_context supplies {undeclared}, not in stream.computed")
            self._context_checked = True
        ctx.update(extra)
        machine = Machine(self.spec, ctx, self.machine_hooks(), entry, self.machine_state())
        if not stream and self.spec.fold:
            machine.context.update(self.spec.fold.get("context") or {})
        return machine

    def fold(self, wire: list[WireEvent], v: Validated) -> Any:
        assert self.spec.fold is not None
        return self.folds()[self.spec.fold["hook"]](wire, v.body)

    async def generate(self, call: Call) -> Reply:
        v = await self.checked(call)
        req = self.engine.apply_model(self.chat_request(v))
        choices = self.choices(v, req)
        if len(choices) > 1:  # several answers (OpenAI's ``n``, several prompts): rows of the same batch
            asked(req.model)
            return await respond_choices(self, v, choices)
        return await self.respond(v, choices[0].req if choices else req)

    def choices(self, v: Validated, req: ChatRequest) -> list[Choice]:
        """The answers a request asks for, one ChatRequest each (protocols/choices.py): by default, one."""
        return [Choice(req)]

    async def respond(self, v: Validated, req: ChatRequest, entry: str | None = None,
                      framing: str | None = None) -> Reply:
        """Run a ChatRequest in one engine session and answer it: SSE when the client asked for a stream,
        else the fold. A stream outlives this handler, so its session belongs to the HTTP request (ended when
        the response is sent, or the client is gone); a folded answer's session ends here."""
        asked(req.model)  # (a refusal on the way, a full queue or a prompt past the window, is logged with it)
        keepalive = self.spec.extra.get("keepalive_seconds")
        stream = bool(v.body.get(self.stream_field))
        machine = self.machine(v, req.model, stream, entry)
        req = req.with_(response_id=machine.context["id"])  # a later request may compare its prompt with this one
        if stream:
            session = await self.services.hold(self.engine.session(req, keepalive))
            events = watch(session, req, stream)
            machine.context.setdefault("prompt_tokens", events.prompt_tokens)  # known before the first event
            machine.context.setdefault("cache_miss", _cache_miss(events))
            machine.context.setdefault("cache_compared", _cache_miss(events, "cache_compared"))
            # what it decoded so far, for a stream cut short before Finished (``abandon``)
            machine.context.setdefault("decoded", lambda: getattr(session, "decoded", (0, 0)))
            return await self.answer(v, machine, events, framing)
        async with self.engine.session(req, keepalive, streamed=False) as session:
            machine.context.setdefault("prompt_tokens", session.prompt_tokens)
            machine.context.setdefault("cache_miss", _cache_miss(session))
            machine.context.setdefault("cache_compared", _cache_miss(session, "cache_compared"))
            return await self.answer(v, machine, watch(session, req, stream))

    async def answer(self, v: Validated, machine: Machine, events: AsyncIterable[TokenEvent],
                     framing: str | None = None) -> Reply:
        """Token events through a machine: SSE (or ``framing``: the spec's, or a WebSocket's) when the client
        asked for a stream, else the fold. Whoever passes ``events`` owns them (a session, or a source the HTTP
        request holds) and ends them."""
        if v.body.get(self.stream_field):
            return Reply.of_stream(self.sse_body(machine, events, v, framing), self.spec.content_type)
        noted = _FailedNoted(events)
        async with aclosing(pump(machine, noted)) as wires:
            wire = [w async for w in wires]
        await self.record(v, machine)
        try:
            return Reply(self.fold(wire, v))
        except ApiError as err:  # a generation that failed of its own kind (a broken group: 503 group_broken) is
            failed = noted.failed  # answered as that kind, as a request refused before it started is, not a 500
            if failed is None or failed.type in ("server_error", err.kind):
                raise
            raise ApiError(failed.type, err.message, err.param, failed.code or err.code, err.headers,
                           err.data) from None

    def shown(self, ev: Failed) -> str:
        """A failure's code, else its type, as this protocol words it to the client (a refused request's too)."""
        kind = self.spec.error_kind(ev.type)
        return ev.code or kind.code or kind.type

    async def sse_body(self, machine: Machine, events: AsyncIterable[TokenEvent],
                       v: Validated | None = None, framing: str | None = None) -> AsyncIterator[bytes]:
        """The wire events, framed as the spec says (SSE, or NDJSON). The stream is open before the engine has
        the model: any failure after that (a model that will not load, not only a decoder failure) ends the
        stream through the protocol's own Failed transition (and its terminal), never with a cut connection."""
        recorded = v is None
        framing = framing or self.spec.framing
        events = _FailedNoted(events, lambda ev: failed(ev, self.shown(ev)))
        try:
            async with aclosing(pump(machine, events)) as wires:
                async for wire in wires:
                    if machine.done and not recorded:  # kept before the last events leave: a client that
                        recorded = True                # acts on them finds the response stored
                        await self.record(v, machine)
                    yield wire.encode(framing)
        except Exception as exc:
            if machine.done:
                raise
            log.exception("stream %s failed", machine.context.get("id"))
            ending = refusal_or_failure(exc)  # (an ApiError's code as the folded answer's: model_load_failed …)
            failed(ending, self.shown(ending))  # (the log line, the dashboard)
            wires = machine.feed(ending)
            if machine.done and not recorded:  # kept as sent (a failed response), before its last event leaves:
                recorded = True                # the id the client saw answers a retrieve, as any failure's does
                await self.record(v, machine)
            for wire in wires:
                yield wire.encode(framing)
            if machine.done and machine.terminal is not None:
                yield machine.terminal.encode(framing)
        finally:
            if not recorded and not machine.done:  # cut short: the client is gone, or the server stops it
                # (whatever cancelled the stream, the record is written: within CUT_RECORD_SECONDS)
                with trio.move_on_after(CUT_RECORD_SECONDS, shield=True) as bound:
                    try:
                        self.abandon(machine)
                        if machine.done:
                            await self.record(v, machine)
                    except Exception:  # (never in place of what ended the stream)
                        log.exception("stream %s: what was sent could not be kept", machine.context.get("id"))
                if bound.cancelled_caught:
                    log.warning("stream %s cut short: not kept, the store did not answer within %g s",
                                machine.context.get("id"), CUT_RECORD_SECONDS)


class _FailedNoted:
    """Token events passed on as they come, the last ``Failed`` among them noted (``failed``; ``seen`` is told)."""

    def __init__(self, events: AsyncIterable[TokenEvent], seen: Callable[[Failed], None] | None = None):
        self._events = events.__aiter__()
        self._seen = seen
        self.failed: Failed | None = None

    def __aiter__(self) -> "_FailedNoted":
        return self

    async def __anext__(self) -> TokenEvent:
        ev = await self._events.__anext__()
        if isinstance(ev, Failed):
            self.failed = ev
            if self._seen is not None:
                self._seen(ev)
        return ev


def _cache_miss(session: Any, name: str = "cache_miss") -> dict | None:
    """Where the prompt parts from the prompt cache (``cache_compared``: from the earlier prompt the request
    named), and why: plain data the engine prepared (None where the backend keeps no cache)."""
    return getattr(getattr(session, "prepared", None), name, None)
