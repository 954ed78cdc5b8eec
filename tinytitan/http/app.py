"""The HTTP layer: every route a spec table declares, guarded by the host allow-list and the API key,
answered in the owning protocol's envelope and headers.

Rules:
- The Host header, parsed strictly (``host[:port]``, nothing after), must name an allowed host (loopback
  names by default): other Hosts get 403 (DNS rebinding). A request or WebSocket upgrade from a web page
  whose ``Origin`` is not allowed gets 403; an allowed origin's CORS preflight is answered (origins.py).
  With ``--api-key``, ``Authorization: Bearer`` or ``x-api-key`` must match: else 401.
  ``/``, ``/health`` (only its status, without the key) and ``/dashboard`` (a page with no data in it) need
  no key.
- A compressed body (``Content-Encoding``) is decoded before a handler sees it, within the body limit
  (encoding.py).
- Any error a client can cause is a 4xx in the envelope of the protocol that owns the path, or the route
  the path lies under (the shared routes use OpenAI's, or Anthropic's when the request carries
  ``anthropic-version``); an unexpected failure is a 500 in the same envelope, logged with its traceback.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import trio
from quart import Response, has_websocket_context, request, websocket
from quart_trio import QuartTrio
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.exceptions import HTTPException
from werkzeug.routing import WebsocketMismatch

from ..engine.engine import Engine
from ..errors import ApiError
from ..observe.observer import Observer
from ..protocols.base import OFF_LOOP_BYTES, Protocol
from ..protocols.wire import Call, Reply, Services
from ..speclang import template
from . import encoding
from .origins import OriginPolicy
from .socket import DEFAULT_IDLE_SECONDS, SocketConnection, Stopping
from ..speclang.validate import query_args
from .trim import Trimmer
from .wire import BODY_WATCH, BodyWatch
from .guard import LOOPBACK_HOSTS, Guard, incoming

log = logging.getLogger("tinytitan.http")

# what the HTTP request being answered holds beyond its handler (see request_scope)
_request_scope: contextvars.ContextVar[AsyncExitStack] = contextvars.ContextVar("tinytitan_request_scope")


@asynccontextmanager
async def request_scope() -> AsyncIterator[None]:
    """The lifetime of one HTTP request, from its handler to the last byte of its response (or the client's
    hang-up): what ``Server.hold`` enters is left, in reverse order, when this block ends."""
    async with AsyncExitStack() as stack:
        token = _request_scope.set(stack)
        try:
            yield
        finally:
            _request_scope.reset(token)


class _Connection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection, with the handler and the sending of its response inside one request
    scope: both run in this one task, so the scope's exit runs there too, however the request ends."""

    async def __call__(self, receive, send) -> None:
        watch = self.scope[BODY_WATCH] = BodyWatch(self.scope)  # a body left unread or stalled, the close (wire.py)
        await super().__call__(watch.receive(receive), watch.send(send))

    async def handle_request(self, nursery, request, send) -> None:
        async with request_scope():
            await super().handle_request(nursery, request, send)


class _App(QuartTrio):
    """quart-trio, with each HTTP request observed (``tinytitan.observe``: its record, log line and metrics)
    from its arrival to the last byte of its response, or the client's hang-up."""

    asgi_http_class = _Connection
    observer: "Observer"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await super().__call__(scope, receive, send)
        with self.observer.request(scope, send) as send:  # its tasks start in a copy of this context
            await super().__call__(scope, receive, send)

    async def full_dispatch_request(self, request_context=None):
        # matched (``url_rule``; None for a 404/405), nothing of it run yet: the observer takes this match
        self.observer.routed(request.url_rule)
        return await super().full_dispatch_request(request_context)

    async def full_dispatch_websocket(self, websocket_context=None):
        self.observer.routed(websocket.url_rule)
        return await super().full_dispatch_websocket(websocket_context)


HTTP_KINDS = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large", 400: "invalid_request"}


def method_of(req) -> str:
    return getattr(req, "method", None) or "GET"


@dataclass
class ServerConfig:
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    max_body_bytes: int = 64 * 1024 * 1024
    responses_store: str | None = "memory"  # a directory, "memory", a postgresql:// URL, or None: the user's state
    responses_retention_days: float = 30.0  # stored responses older than this are evicted (0: kept for ever)
    responses_max_mib: int = 2048  # past this many MiB stored, the oldest responses are evicted (0: no bound)
    websocket: bool = True  # False: the WebSocket routes are not served (an upgrade there is 426)
    allowed_origins: tuple[str, ...] = ()  # web pages' origins allowed beyond loopback and the server's own
    max_websockets: int = 32  # WebSocket connections open at once; one more is refused (426: Codex then uses HTTP)
    fetch_images: bool = False  # True: remote image URLs are fetched (http/fetch.py); else refused by name
    body_idle_seconds: float = 60.0  # a request body none of which arrives for this long is refused (wire.py)


class Server(Guard):
    def __init__(self, engine: Engine, protocols: list[Protocol], config: ServerConfig | None = None):
        self.engine = engine
        self.config = config or ServerConfig()
        self.protocols = {p.name: p for p in protocols}
        self.state: dict[str, Any] = {}  # what protocols keep per server (e.g. the Responses store)
        self.shared = self.protocols["shared"]
        self.allowed = {h.lower() for h in self.config.allowed_hosts}
        self.origins = OriginPolicy(self.config.allowed_origins)
        self.app = _App("tinytitan")
        self.observer = self.app.observer = Observer(engine, self.app)
        self.app.config.update(MAX_CONTENT_LENGTH=self.config.max_body_bytes, RESPONSE_TIMEOUT=None,
                               BODY_TIMEOUT=None, PROVIDE_AUTOMATIC_OPTIONS=False)
        # a path is matched as sent: werkzeug's redirect of ``/v1//models`` is an HTML page no client reads
        self.app.url_map.merge_slashes = False
        self._path_owner: dict[str, Protocol] = {}
        self._socket_paths: set[str] = set()
        self._sockets_open = 0
        self.stopping = Stopping()  # (the open WebSockets close with 1001 when it begins: socket.py)
        for proto in protocols:
            handlers = proto.handlers()
            for i, route in enumerate(proto.spec.routes):
                endpoint = f"{proto.name}:{route['handler']}:{route['method']}:{i}"
                self._path_owner.setdefault(route["path"], proto)
                if route["method"] == "WEBSOCKET":
                    self._socket_paths.add(route["path"])
                    if self.config.websocket:
                        self.app.add_websocket(route["path"], endpoint,
                                               self._socket_view(proto, handlers[route["handler"]]))
                    continue
                self.app.add_url_rule(route["path"], endpoint,
                                      self._view(proto, handlers[route["handler"]], route.get("query")),
                                      methods=[route["method"]])
        # a path under a protocol's route (``/v1/messages/batches``) is that protocol's too, for its errors
        self._prefix_owner = sorted([(p.rstrip("/") + "/", o) for p, o in self._path_owner.items()
                                     if o is not self.shared and "<" not in p and p != "/"] +
                                    [(p.spec.raw["prefix"], p) for p in protocols if p.spec.raw.get("prefix")],
                                    key=lambda item: -len(item[0]))
        fetcher = None
        if self.config.fetch_images:  # (only fetching imports httpx: a tenth of a second of every start otherwise)
            from .fetch import with_fetched_images as fetcher
        self.services = Services(engine, self.hold, self.state, self.config, self.observer, fetcher)
        for proto in protocols:
            proto.attach(self.services)
        self.trimmer = Trimmer()  # memory back to the system after a large body (trim.py)
        self._background = trio.CancelScope()
        if getattr(engine, "background", None) is not None:  # work between requests (memory consolidation)
            self.app.before_serving(self._start_background)
            self.app.after_serving(self._stop_background)
        self.app.before_request(self._guard)
        self.app.before_websocket(self._guard)  # an upgrade passes the same Host and key checks
        self.app.after_request(self._headers)
        self.app.after_websocket(self._headers)  # (on the HTTP answer that refuses an upgrade)
        self.app.register_error_handler(ApiError, self._api_error)
        self.app.register_error_handler(HTTPException, self._http_error)
        self.app.register_error_handler(Exception, self._unexpected)

    async def _start_background(self) -> None:
        async def run():
            with self._background:
                await self.engine.background()

        self.app.nursery.start_soon(run)

    async def _stop_background(self) -> None:
        # async: quart-trio runs a plain function in a worker thread, where a CancelScope cannot be cancelled
        self._background.cancel()

    # -- ownership and envelopes -----------------------------------------------------------------------------
    def owner(self) -> Protocol:
        request = incoming()
        rule = request.url_rule
        if rule is not None:
            proto = self.protocols.get(rule.endpoint.split(":", 1)[0])
            if proto is not None and proto is not self.shared:
                return proto
        path = request.path
        proto = self._path_owner.get(path)
        if proto is not None and proto is not self.shared:
            return proto
        for prefix, proto in self._prefix_owner:
            if path.startswith(prefix):
                return proto
        for header, name in self.shared.spec.error_by_header.items():
            if header in request.headers and name in self.protocols:
                return self.protocols[name]
        return self.shared

    def error(self, err: ApiError) -> Response:
        owner = self.owner()
        kind = owner.spec.error_kind(err.kind)
        # the field in the wire's own name, as the answer names it (the engine names ChatRequest's: ``messages``)
        self.observer.refused(err.code or kind.code or kind.type, owner.spec.error_params.get(err.param, err.param))
        status, body = owner.error_response(err, getattr(incoming(), "request_id", None))
        resp = self.json_response(body, status)
        for k, v in {**owner.spec.error_kind(err.kind).headers, **err.headers}.items():
            resp.headers[k] = v
        return resp

    def upgrade_refusal(self, path: str) -> ApiError:
        """A WebSocket upgrade on a path without a WebSocket route: 426 on a path that answers plain HTTP (a client
        such as Codex then falls back to HTTP at once), 404 on a path nothing serves."""
        try:
            self.app.url_map.bind("localhost").match(path, "POST")
            served = True
        except HTTPException as exc:
            served = exc.code == 405
        if served:
            return ApiError("upgrade_required", f"{path} does not take a WebSocket here: send the request over "
                            "plain HTTP")
        return ApiError("not_found", f"No WebSocket route for {path}")

    async def _api_error(self, err: ApiError):
        return self.error(err)

    async def _http_error(self, exc: HTTPException):
        request = incoming()
        if has_websocket_context():  # an upgrade no WebSocket route takes: 426 where HTTP is spoken, else 404
            return self.error(self.upgrade_refusal(request.path))
        method = method_of(request)
        allow = {"Allow": ", ".join(self.allowed_methods(request.path))}
        if isinstance(exc, WebsocketMismatch) or (exc.code == 405 and method == "GET"
                                                  and request.path in self._socket_paths and self.config.websocket):
            # a plain GET on a path whose GET is a WebSocket's
            return self.error(ApiError("method_not_allowed", f"{method} {request.path} takes a WebSocket upgrade "
                                       "(Upgrade: websocket) here, not a plain request", headers=allow))
        kind = HTTP_KINDS.get(exc.code or 500, "server_error")
        message = {404: f"No route for {method} {request.path}",
                   405: f"Method {method} is not allowed on {request.path}",
                   413: f"The request body is larger than {self.config.max_body_bytes} bytes"}.get(exc.code,
                                                                                                  exc.description)
        return self.error(ApiError(kind, message or "bad request",  # (a 405 says what the path takes: RFC 9110)
                                   headers=allow if exc.code == 405 else None))

    def allowed_methods(self, path: str) -> list[str]:
        """The methods ``path`` takes (a 405's ``Allow``): the router's, less the HEAD it adds beside a WebSocket's
        GET, which is refused there."""
        adapter = self.app.url_map.bind("localhost")
        try:
            methods = set(adapter.allowed_methods(path))
        except HTTPException:
            return []
        try:
            if "HEAD" in methods:
                adapter.match(path, "HEAD")
        except HTTPException:
            methods.discard("HEAD")
        return sorted(methods)

    async def _unexpected(self, exc: Exception):
        request = incoming()
        log.exception("unexpected error on %s %s", method_of(request), request.path)
        return self.error(ApiError("server_error", f"internal error: {type(exc).__name__}: {exc}"))

    # -- responses -----------------------------------------------------------------------------------------------
    def _view(self, proto: Protocol, handler, query: dict | None = None):
        """A protocol handler behind a route: the request as a neutral Call in (its declared query parameters
        typed and checked, as the route's ``query`` table says), its Reply written out."""
        async def view(**kwargs):
            headers = {k.lower(): v for k, v in request.headers.items()}
            watch = request.scope.get(BODY_WATCH)
            idle = self.config.body_idle_seconds
            if watch is not None and not await watch.arrived(idle, self.config.max_body_bytes):
                raise ApiError("request_timeout", f"The request body stopped arriving: no byte of it for {idle:g} s "
                               "(send it whole, or over a faster connection)",
                               data={"details": {"error_code": "request_body_timeout"}})  # (Anthropic's words)
            body = await request.get_data()
            if encoding.codings(headers.get("content-encoding")):  # on a thread: a bomb costs a second of CPU
                body = await trio.to_thread.run_sync(encoding.decode, body, headers["content-encoding"],
                                                     self.config.max_body_bytes)
            args = dict(request.args)
            call = Call(request.method, request.path, headers, args, body, query_args(query, request.args))
            try:
                reply = await handler(call, **kwargs)
                if request.method == "HEAD" and reply.stream is not None:  # the headers alone: the stream never runs
                    aclose = getattr(reply.stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
                    resp = self.sse_response(_nothing(), reply.content_type or "text/event-stream; charset=utf-8")
                    resp.headers.update(reply.headers)
                    return resp
                return self.write(reply)
            finally:  # answered or refused: a large body's memory goes back once its objects are let go
                if len(call.body) >= OFF_LOOP_BYTES:
                    self.trimmer.after_large(getattr(self.app, "nursery", None))

        view.__name__ = f"{proto.name}_{handler.__name__}"
        return view

    def _socket_view(self, proto: Protocol, handler):
        """A protocol's WebSocket handler behind a route: the upgrade accepted (with every response's headers),
        its frames handed over as a Connection (socket.py)."""
        async def view(**kwargs):
            ws = websocket  # (this task's socket: the handler and its connection run in its context)
            call = Call("GET", ws.path, {k.lower(): v for k, v in ws.headers.items()}, dict(ws.args))
            headers = {}
            ctx = {"request_id": getattr(ws, "request_id", "")}
            for p in {id(p): p for p in (self.shared, proto)}.values():
                for k, v in p.spec.headers.items():
                    headers[k] = str(template.render(v, ctx))
            cap = self.config.max_websockets
            if self._sockets_open >= cap:  # (refused before it is accepted: an HTTP answer the client reads)
                raise ApiError("upgrade_required", f"Too many WebSocket connections are open ({cap}, the server's "
                               "--max-websockets): send the request over plain HTTP, or close another socket",
                               code="websocket_connection_limit_reached")
            self._sockets_open += 1
            try:
                await ws.accept(headers=headers)
                idle = float((proto.spec.extra.get("websocket") or {}).get("idle_seconds", DEFAULT_IDLE_SECONDS))
                conn = SocketConnection(ws, self.config.max_body_bytes, idle, self.observer, request_scope,
                                        self.stopping)
                await conn.run(functools.partial(handler, call, conn, **kwargs))
            finally:
                self._sockets_open -= 1

        view.__name__ = f"{proto.name}_{handler.__name__}"
        return view

    def write(self, reply: Reply) -> Response:
        if reply.stream is not None:
            resp = self.sse_response(reply.stream, reply.content_type or "text/event-stream; charset=utf-8")
        elif reply.text is not None:
            resp = self.text_response(reply.text, reply.content_type or "text/plain; charset=utf-8", reply.status)
        else:
            resp = self.json_response(reply.body, reply.status)
        for k, v in reply.headers.items():
            resp.headers[k] = v
        return resp

    @staticmethod
    def json_response(obj: Any, status: int = 200) -> Response:
        # a lone surrogate (in a value an error message quotes) goes out as its JSON escape, never as a failure
        # to encode the answer
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace")
        return Response(body, status=status, content_type="application/json")

    @staticmethod
    async def hold(context: AbstractAsyncContextManager) -> Any:
        """Enter ``context`` for the rest of the HTTP request being answered (e.g. the engine session of a
        stream, whose body is sent after the handler returns) and return what it gives."""
        stack = _request_scope.get(None)
        if stack is None:
            raise RuntimeError("Server.hold outside an HTTP request: run it inside request_scope()")
        return await stack.enter_async_context(context)

    @staticmethod
    def text_response(body: bytes | str, content_type: str, status: int = 200) -> Response:
        return Response(body, status=status, content_type=content_type)

    @staticmethod
    def sse_response(body: AsyncIterator[bytes], content_type: str = "text/event-stream; charset=utf-8") -> Response:
        """A streamed response: SSE by default, or the framing a protocol's spec names (NDJSON)."""
        resp = Response(body, status=200, content_type=content_type)
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.timeout = None
        return resp


async def _nothing():
    """The body of a stream answered to HEAD."""
    return
    yield
