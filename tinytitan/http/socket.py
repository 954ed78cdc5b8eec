"""A WebSocket route's transport: the accepted socket as a protocol handler sees it (protocols/wire.py's
``Connection``), over quart's ``websocket``.

Rules:
- The upgrade is accepted with the headers every response carries (the protocol's and the shared ones).
- ``receive`` gives text frames. A binary frame, or a frame over the body limit, is refused (ApiError) and the
  socket stays open; a client that stays quiet for the protocol's ``idle_seconds`` is closed (None).
  Pings are answered by the server (hypercorn), frames compressed with permessage-deflate are inflated there.
- Each exchange (``turn``) is one request scope — what ``Server.hold`` enters ends with it — and one record for
  the observer (its log line says ``WS`` and the path, with the status the exchange ended with).
- A client that goes away cancels the handler (quart-trio cancels it on the disconnect): the exchange's scope
  exits, and with it its generation.
- When the server stops (``Stopping.begin``), every open socket is closed with 1001 (going away) and a reason,
  before the HTTP server's graceful shutdown cuts the connections (which a client reads as 1006, abnormal): at
  once where it waits for a frame; where an exchange is in flight, after it ends (its generation, still running
  at the engine's ``wind_down``, ends with ``response.failed``) or after ``grace`` seconds, the exchange stopped
  where it stands.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

import trio

from ..errors import ApiError, invalid

DEFAULT_IDLE_SECONDS = 600.0
GOING_AWAY = 1001  # RFC 6455 7.4.1: the server is going down
GOING_AWAY_REASON = "server shutting down"
CLOSE_SECONDS = 1.0  # the longest the close frame may take to go out


class Stopping:
    """The server's shutdown as its open sockets see it: ``begin`` once, when it starts."""

    def __init__(self):
        self.event = trio.Event()
        self.grace = 0.0

    def begin(self, grace: float) -> None:
        """Close every open socket: an exchange in flight may run on for ``grace`` seconds."""
        self.grace = grace
        self.event.set()


class SocketConnection:
    def __init__(self, ws, max_frame_bytes: int, idle_seconds: float, observer, scope, stopping: Stopping):
        self.ws = ws
        self.max_frame_bytes = max_frame_bytes
        self.idle_seconds = idle_seconds
        self.observer = observer
        self.scope = scope  # (an async context manager factory: one request's scope)
        self.stopping = stopping
        self._turn = None
        self._turn_over: trio.Event | None = None  # set when the exchange in flight ends

    async def run(self, handler: Callable[[], Awaitable[None]]) -> None:
        """The protocol's handler on this socket until it returns, or until the server stops: then the socket is
        closed with 1001 (going away)."""
        stopped = False
        async with trio.open_nursery() as nursery:
            async def close_on_stop():
                nonlocal stopped
                await self.stopping.event.wait()
                if self._turn_over is not None:
                    with trio.move_on_after(self.stopping.grace):
                        await self._turn_over.wait()
                stopped = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(close_on_stop)
            await handler()
            nursery.cancel_scope.cancel()
        if stopped:
            # shielded, and bounded: the generation's end may have taken the shutdown's time
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_SECONDS):
                await self.ws.close(GOING_AWAY, GOING_AWAY_REASON)

    async def receive(self) -> str | None:
        with trio.move_on_after(self.idle_seconds):
            data = await self.ws.receive()
            if data is None or isinstance(data, (bytes, bytearray)):  # (an empty binary frame reaches us as None)
                raise invalid("Binary frames are not accepted on this socket: send each message as a JSON object "
                              "in a text frame", code="binary_frame")
            size = len(data.encode("utf-8", "surrogatepass"))
            if size > self.max_frame_bytes:
                raise ApiError("request_too_large", f"The frame is larger than {self.max_frame_bytes} bytes "
                               f"({size})")
            return data
        return None  # quiet too long: the handler returns and the socket is closed

    async def send(self, text: str) -> None:
        await self.ws.send(text)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        async with self.scope():
            with self.observer.exchange(self.ws) as record:
                self._turn, self._turn_over = record, trio.Event()
                try:
                    yield
                finally:
                    self._turn_over.set()
                    self._turn = self._turn_over = None

    def status(self, code: int) -> None:
        if self._turn is not None:
            self._turn.status = code
