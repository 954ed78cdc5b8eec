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
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from ..errors import ApiError, invalid

DEFAULT_IDLE_SECONDS = 600.0


class SocketConnection:
    def __init__(self, ws, max_frame_bytes: int, idle_seconds: float, observer, scope):
        self.ws = ws
        self.max_frame_bytes = max_frame_bytes
        self.idle_seconds = idle_seconds
        self.observer = observer
        self.scope = scope  # (an async context manager factory: one request's scope)
        self._turn = None

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
                self._turn = record
                try:
                    yield
                finally:
                    self._turn = None

    def status(self, code: int) -> None:
        if self._turn is not None:
            self._turn.status = code
