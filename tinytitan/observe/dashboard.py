"""The dashboard page (``GET /`` for a browser, ``GET /dashboard``) and its live feed (``/dashboard/events``).

Rules:
- One static HTML file, everything inline: no build step, nothing fetched from another origin (the
  Content-Security-Policy says so to the browser too).
- The page itself holds no data, so it needs no key; the feed does (the page asks for ``--api-key`` once and
  keeps it in the tab's session storage).
- The feed is SSE: a ``snapshot`` (engine state and the recent requests), then ``request`` and ``state``
  events as they happen, and a comment every ``PING_SECONDS`` so a proxy keeps the connection open.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, AsyncIterator

import trio

if TYPE_CHECKING:
    from .observer import Observer

PING_SECONDS = 15.0
CONTENT_TYPE = "text/html; charset=utf-8"
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
       "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def page() -> bytes:
    return resources.files(__package__).joinpath("dashboard.html").read_bytes()


def sse(kind: str, data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def feed(observer: "Observer") -> AsyncIterator[bytes]:
    """The live feed, for as long as the browser stays; a subscriber that fell behind is ended (the page
    reconnects for a fresh snapshot)."""
    receive = observer.subscribe()
    try:
        yield sse("snapshot", {"state": observer.state(), "recent": observer.recent()})
        while True:
            item = None
            with trio.move_on_after(PING_SECONDS):
                try:
                    item = await receive.receive()
                except trio.EndOfChannel:
                    return
            yield sse(*item) if item is not None else b": ping\n\n"
    finally:
        observer.unsubscribe(receive)
        receive.close()
