"""HTTP/1.1 connection hygiene that the ASGI server leaves to the application.

Rules:
- A response sent before its request's body was read (an unknown route, a wrong API key, a bad Host, a
  cancel) waits, at its first byte, for the rest of that body to arrive — at most ``DRAIN_BYTES`` more,
  for at most ``DRAIN_SECONDS`` — so the connection stays usable for the client's next request. A longer
  remainder is not read: the response says ``Connection: close`` and the connection is closed after it.
- The last message of a response is sent shielded from cancellation. quart-trio cancels a request's tasks
  the moment the request's messages end, and the ASGI server finishes the connection's cycle inside that last
  send: it closes a connection that must close (the client sent ``Connection: close``, or the body was left
  unread), and starts the keep-alive timer of one that stays open. Cancelled there, the close never finished
  (the socket stayed open, answering nothing) and the timer never started (an idle connection was held for
  ever). hypercorn 0.18 does not stop that timer when the client closes its side, so a connection the client
  closed after its answer is held (CLOSE-WAIT, one descriptor) until the timer ends: serve.py keeps it short.
- A body that stops arriving (no byte of it for ``ServerConfig.body_idle_seconds``, 60 by default: a client
  that hung, or a slowloris holding connections open) is answered with a ``request_timeout`` error in the
  protocol's envelope, and its connection closed: nothing else bounds the time a request may take to send
  its body. Each byte that arrives restarts the wait, so a large body on a slow link is read whole. That
  answer goes out at once: the rest of a body that stopped arriving is not waited for.
"""

from __future__ import annotations

import trio

DRAIN_BYTES = 4 << 20
DRAIN_SECONDS = 5.0
BODY_WATCH = "tinytitan.body"  # the ASGI scope's key for a request's BodyWatch
LAST_SEND_SECONDS = 30.0  # the shielded last send still gives up on a client that reads nothing


class BodyWatch:
    """Wraps one HTTP request's ASGI ``receive`` and ``send`` (see the rules above)."""

    def __init__(self, scope: dict):
        self.complete = trio.Event()
        self._progress = trio.Event()
        self.received = 0
        self.stalled = False  # no byte of the body came for the idle time (``arrived``): nothing is drained
        self.length: int | None = None
        for name, value in scope.get("headers", []):
            if name.lower() == b"content-length":
                try:
                    self.length = int(value)
                except ValueError:
                    pass

    def receive(self, receive):
        async def watched():
            message = await receive()
            if message["type"] == "http.request":
                self.received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    self.complete.set()
            elif message["type"] == "http.disconnect":
                self.complete.set()
            self._progress.set()
            self._progress = trio.Event()
            return message

        return watched

    def send(self, send):
        async def watched(message):
            if message["type"] == "http.response.start" and not self.complete.is_set() and (
                    self.stalled or not await self._drain()):
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + LAST_SEND_SECONDS
                    await send(message)
                return
            await send(message)

        return watched

    async def arrived(self, idle: float, limit: int | None = None) -> bool:
        """Wait for the whole body; False: none of it arrived for ``idle`` seconds (the client stalled). A body
        declared or grown past ``limit`` bytes is not waited for: the framework refuses it (413) at once."""
        def over() -> bool:
            return limit is not None and ((self.length or 0) > limit or self.received > limit)

        while not self.complete.is_set() and not over():
            progress = self._progress
            with trio.move_on_after(idle) as waited:
                await progress.wait()
            if waited.cancelled_caught:
                self.stalled = True
                return False
        return True

    async def _drain(self) -> bool:
        """Wait for the rest of the body (read by the framework as it arrives); False: too much is left."""
        if self.length is not None and self.length - self.received > DRAIN_BYTES:
            return False
        limit = self.received + DRAIN_BYTES
        with trio.move_on_after(DRAIN_SECONDS):
            while not self.complete.is_set() and self.received <= limit:
                await self._progress.wait()
        return self.complete.is_set()
