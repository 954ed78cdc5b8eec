"""The narrow interface between the HTTP layer and a protocol: what a handler is given, what it answers, and
the services it may use. Nothing here knows a web framework.

Rules:
- A handler is ``async def handler(call: Call, **path_params) -> Reply``. It never sees the framework's
  request, the server, or engine internals: the call's method, path, headers (names lower-case), query and
  body bytes, and the ``Services`` its protocol was attached to (the engine's public API, the per-server
  state, the request-scoped ``hold``).
- A ``Reply`` is a JSON object with a status, a text body, or a stream of bytes with its content type; the
  HTTP layer writes it, adding the protocol's headers.
- A WebSocket route's handler is ``async def handler(call: Call, conn: Connection)``: ``call`` is the upgrade
  request (no body), ``conn`` the accepted socket's text frames. Each exchange a handler answers runs inside
  ``conn.turn()``, the socket's counterpart of one HTTP request (what ``Services.hold`` enters ends with it).
- ``Services.hold(context)`` enters an async context manager for the rest of the HTTP request (a stream's
  engine session outlives the handler that opened it) and returns what it yields.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..observe.observer import Observer


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-case
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    args: Mapping[str, Any] = field(default_factory=dict)  # the route's declared query parameters, typed

    def prefers(self, *types: str) -> str:
        """The first of ``types`` the Accept header ranks highest (q-values; ties keep the order given)."""
        ranks: dict[str, float] = {}
        for part in self.headers.get("accept", "*/*").split(","):
            kind, _, params = part.strip().partition(";")
            q = 1.0
            for p in params.split(";"):
                name, _, value = p.strip().partition("=")
                if name == "q":
                    try:
                        q = float(value)
                    except ValueError:
                        q = 0.0
            ranks[kind.strip().lower()] = q
        def rank(t: str) -> float:
            return ranks.get(t, ranks.get(t.split("/")[0] + "/*", ranks.get("*/*", 0.0)))
        return max(types, key=lambda t: (rank(t), -types.index(t)))


@dataclass
class Reply:
    body: Any = None  # a JSON-able object (sent as application/json), unless ``text`` or ``stream`` is set
    status: int = 200
    text: str | bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_text(cls, text: str | bytes, content_type: str, **headers: str) -> "Reply":
        return cls(text=text, content_type=content_type, headers=dict(headers))

    @classmethod
    def of_stream(cls, chunks: AsyncIterator[bytes], content_type: str) -> "Reply":
        return cls(stream=chunks, content_type=content_type)


class Connection(Protocol):
    """An accepted WebSocket, as its handler sees it (written by the HTTP layer)."""

    async def receive(self) -> str | None:
        """The next text frame; None once the client closed the socket or it stayed quiet too long. A frame the
        socket refuses (binary, or over the body limit) raises ApiError, and the next one can still be read."""

    async def send(self, text: str) -> None:
        """One text frame."""

    def turn(self) -> AbstractAsyncContextManager[None]:
        """One exchange's lifetime (see the rules above)."""

    def status(self, code: int) -> None:
        """The status the current exchange ended with, for its log line (200 unless told)."""


@dataclass
class Services:
    """What a protocol may use besides the call: one per server."""

    engine: "Engine"
    hold: Callable[[AbstractAsyncContextManager], Awaitable[Any]]
    state: dict = field(default_factory=dict)  # what protocols keep per server (e.g. the Responses store)
    config: Any = None  # the server's settings (ServerConfig)
    observer: "Observer | None" = None
    # (call, the spec's image URL paths) → the call with its remote images fetched; None: fetching is off
    fetch_images: Callable[[Call, list[str]], Awaitable[Call]] | None = None
