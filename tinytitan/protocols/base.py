"""What every protocol shares: spec loading, validation into a ChatRequest, the machine, the fold,
the error envelope and the generic generation handler.

A protocol module subclasses ``Protocol`` and supplies only hooks: request hooks (message shapes),
machine hooks (bookkeeping), the fold, and handlers for routes that are not plain generation.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from ..chat_request import ChatRequest
from ..errors import ApiError
from ..events import Failed, TokenEvent
from ..speclang import ProtocolSpec, load_protocol
from ..speclang import template
from ..speclang.machine import Machine, WireEvent, pump
from ..speclang.validate import RequestValidator, Validated

if TYPE_CHECKING:
    from ..http.app import Server

log = logging.getLogger("tinytitan.protocol")


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class Protocol:
    name: str = ""
    id_prefix: str = "id-"
    stream_field: str = "stream"

    def __init__(self, spec_directory: Path | None = None):
        self.spec: ProtocolSpec = load_protocol(self.name, spec_directory)
        self.validator = RequestValidator(self.spec, self.request_hooks())
        # a route whose spec entry changes request fields (``routes[].fields``) validates with its own table
        self.route_validators = {r["handler"]: RequestValidator(self.spec, self.request_hooks(), r["fields"])
                                 for r in self.spec.routes if r.get("fields")}
        missing = sorted({r["handler"] for r in self.spec.routes} - set(self.handlers()))
        if missing:
            raise ValueError(f"{self.spec.source}: route handlers not provided by the protocol module: {missing}")
        states = (self.spec.stream or {}).get("states", {})
        named = {h for table in states.values() for row in table.values() for h in row.get("do", [])}
        missing = sorted(named - set(self.machine_hooks()))
        if missing:
            raise ValueError(f"{self.spec.source}: machine hooks not provided by the protocol module: {missing}")

    # -- what subclasses supply ------------------------------------------------------------------------------
    def request_hooks(self) -> dict[str, Callable]:
        return {}

    def machine_hooks(self) -> dict[str, Callable]:
        return {}

    def folds(self) -> dict[str, Callable[[list[WireEvent], dict], Any]]:
        return {}

    def handlers(self) -> dict[str, Callable]:
        return {"generate": self.generate}

    def extra_context(self, v: Validated, server: "Server") -> dict:
        return {}

    def attach(self, server: "Server") -> None:
        """Called once when a server is built with this protocol (open what it keeps, e.g. a store)."""

    def record(self, server: "Server", v: Validated, machine: Machine) -> None:
        """Called once a response's machine reached its final state (stream or not): a protocol that keeps
        finished responses stores them here. A stream the client dropped never gets here."""

    # -- errors --------------------------------------------------------------------------------------------
    def error_response(self, err: ApiError) -> tuple[int, dict]:
        kind = self.spec.error_kind(err.kind)
        ctx = {"message": err.message, "type": kind.type, "param": err.param, "code": err.code or kind.code}
        return kind.status, template.render(self.spec.error_envelope, ctx)

    # -- the request path ----------------------------------------------------------------------------------
    def validate(self, raw: bytes, handler: str | None = None, headers=None) -> Validated:
        """``headers``: the request's, for hooks whose rules depend on one (as ``notes["headers"]``)."""
        validator = self.route_validators.get(handler, self.validator)
        notes = {"headers": {k.lower(): v for k, v in headers.items()}} if headers is not None else {}
        return validator.validate(validator.parse_json(raw), notes)

    def chat_request(self, v: Validated) -> ChatRequest:
        args = dict(v.args)
        args["messages"] = tuple(args.get("messages", ()))
        args["tools"] = tuple(args.get("tools", ()))
        args["stop"] = tuple(args.get("stop", ()))
        return ChatRequest(**args)

    def machine(self, v: Validated, model_id: str, stream: bool, server: "Server",
                entry: str | None = None) -> Machine:
        ctx: dict[str, Any] = {"req": v.body, "id": new_id(self.id_prefix), "created": int(time.time()),
                               "model": model_id}
        ctx.update(self.extra_context(v, server))
        machine = Machine(self.spec, ctx, self.machine_hooks(), entry)
        if not stream and self.spec.fold:
            machine.context.update(self.spec.fold.get("context") or {})
        return machine

    def fold(self, wire: list[WireEvent], v: Validated) -> Any:
        assert self.spec.fold is not None
        return self.folds()[self.spec.fold["hook"]](wire, v.body)

    async def generate(self, server: "Server", request) -> Any:
        v = self.validate(await request.get_data(), headers=request.headers)
        req = server.engine.apply_model(self.chat_request(v))
        return await self.respond(server, v, req)

    async def respond(self, server: "Server", v: Validated, req: ChatRequest) -> Any:
        """Run a ChatRequest and answer it: SSE when the client asked for a stream, else the fold."""
        engine = server.engine
        prepared = await engine.prepare(req)
        ticket = engine.admit()  # refused at once when the queue is full
        server.hold_for_request(ticket)
        try:
            events = engine.generate(prepared, ticket, self.spec.extra.get("keepalive_seconds"))
            machine = self.machine(v, req.model, bool(v.body.get(self.stream_field)), server)
            machine.context.setdefault("prompt_tokens", len(prepared.tokens))  # known before the first event
        except BaseException:
            ticket.release()
            raise
        return await self.answer(server, v, machine, events, ticket)

    async def answer(self, server: "Server", v: Validated, machine: Machine, events: AsyncIterator[TokenEvent],
                     ticket=None) -> Any:
        """Token events through a machine: SSE when the client asked for a stream, else the fold."""
        if v.body.get(self.stream_field):
            return server.sse_response(StreamBody(self.sse_body(machine, events, ticket, server, v), ticket))
        try:
            async with aclosing(pump(machine, events)) as wires:
                wire = [w async for w in wires]
        finally:
            try:
                await events.aclose()
            finally:  # even when a cancellation interrupts the close
                if ticket is not None:
                    ticket.release()
        self.record(server, v, machine)
        return server.json_response(self.fold(wire, v))

    async def sse_body(self, machine: Machine, events: AsyncIterator[TokenEvent], ticket, server=None,
                       v: Validated | None = None) -> AsyncIterator[bytes]:
        """The wire events as SSE. The stream is open before the engine has the model: any failure after that
        (a model that will not load, not only a decoder failure) ends the stream through the protocol's own
        Failed transition (and its terminal), never with a cut connection."""
        recorded = v is None
        try:
            async with aclosing(pump(machine, events)) as wires:
                async for wire in wires:
                    if machine.done and not recorded:  # kept before the last events leave: a client that
                        recorded = True                # acts on them finds the response stored
                        self.record(server, v, machine)
                    yield wire.sse()
        except Exception as exc:
            if machine.done:
                raise
            log.exception("stream %s failed", machine.context.get("id"))
            kind = exc.kind if isinstance(exc, ApiError) else "server_error"
            text = exc.message if isinstance(exc, ApiError) else f"generation failed: {exc}"
            for wire in machine.feed(Failed(text, type=kind)):
                yield wire.sse()
            if machine.done and machine.terminal is not None:
                yield machine.terminal.sse()
        finally:
            try:
                await events.aclose()
            finally:
                if ticket is not None:
                    ticket.release()


class StreamBody:
    """An SSE response body that gives its queue place back when it is closed, started or not (a client that
    hangs up at once: the body generator never ran, so its own ``finally`` cannot). A body dropped unsent is
    covered by ``Server.hold_for_request``."""

    def __init__(self, chunks: AsyncIterator[bytes], ticket=None):
        self._chunks = chunks
        self._ticket = ticket

    def __aiter__(self) -> "StreamBody":
        return self

    async def __anext__(self) -> bytes:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        try:
            await self._chunks.aclose()  # a started body releases its ticket itself, in its own finally
        finally:
            if self._ticket is not None:
                self._ticket.release()
