"""The observer: every HTTP request's record, from arrival to the last byte sent; the log line, the
metrics, the rolling window behind ``/profile`` and the live feed behind the dashboard.

Rules:
- One record per HTTP request (``request(scope, send)`` wraps the ASGI call); it is final once the response
  is fully sent (a stream included) or the client hung up.
- A line at info per request: method, path, status, protocol, model, tokens, TTFT, duration, client, number
  of tools, and for a refused or failed request why (``error=`` its code, ``param=`` the field it names); tool
  names at debug. Never prompt or answer text (records hold none).
- The window keeps the last ``WINDOW`` generations: requests that ran the model, and POSTs to a protocol's
  routes that were refused (a client's bad request is worth seeing). The rest stays out: the shared routes
  (the dashboard's own traffic, health checks, scrapes) and a protocol's lookups (an Ollama UI polling
  ``/api/tags``, count_tokens, a stored response fetched), which would push the turns out of ``/profile``.
- The live feed is a set of bounded channels: a subscriber that falls behind is dropped, never waited for.
- The route and protocol are the framework's own match (``routed(rule)``, called once it has matched and before
  any handler runs; no rule: a 404, a 405 or a redirect, "unmatched"). The arrival is pushed to the dashboard
  then. Only a request the framework never matched (it failed before dispatch) is matched here, at its end.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from contextlib import contextmanager
from typing import Any

import trio

from .clients import client_name
from .metrics import Metrics
from .state import engine_state
from .turn import Turn, current_turn

log = logging.getLogger("tinytitan.requests")

WINDOW = 256
FEED_BUFFER = 64
QUIET_PROTOCOLS = ("shared", "none")  # routes every client shares; unmatched paths


def _printable(text: str) -> str:
    """A client-chosen string (the path) for a log line: control characters escaped, so a request cannot
    write a line of its own (``%0A`` in a path decodes to a newline)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _cache_text(miss: dict | None) -> str:
    """`` cache=<reason>``, and for a miss where the prompt parted from the cache: token, part, tokens lost."""
    if not miss:
        return ""
    if miss.get("reason") == "hit":
        return " cache=hit"
    where = _printable(miss.get("where") or "-").replace(" ", "_")
    return f" cache={miss['reason']}@{miss.get('offset', 0)}:{where} cache_lost={miss.get('missed_tokens', 0)}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


class Observer:
    def __init__(self, engine: Any, app: Any):
        self.engine = engine
        self.app = app
        self.metrics = Metrics(engine)
        self.window: collections.deque[Turn] = collections.deque(maxlen=WINDOW)
        # /profile's window: the generations alone, so refused requests (kept for the dashboard) push none out
        self.generations: collections.deque[Turn] = collections.deque(maxlen=WINDOW)
        self._feeds: dict[trio.MemoryReceiveChannel, trio.MemorySendChannel] = {}

    # -- the request's life ---------------------------------------------------------------------------------
    @contextmanager
    def request(self, scope: dict, send):
        """Around one ASGI HTTP call, or a WebSocket connection (its method is GET; an accepted upgrade's status
        is 101, a refused one's the status of its HTTP answer): yields the ``send`` to use (it notes the status and
        request id)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        ua = headers.get("user-agent", "")
        turn = Turn(scope.get("method", "GET"), scope.get("path", ""), client_name(ua), ua)
        turn.on_change = self.push_state
        token = current_turn.set(turn)

        async def noting_send(message):
            if message["type"] in ("http.response.start", "websocket.http.response.start", "websocket.accept"):
                turn.status = message.get("status", 101)
                for k, v in message.get("headers", ()):
                    if k.lower() == b"x-request-id":
                        turn.request_id = v.decode("latin-1")
            await send(message)

        try:
            yield noting_send
        finally:
            current_turn.reset(token)
            self.end(turn)

    @contextmanager
    def exchange(self, ws: Any):
        """One exchange on an accepted WebSocket (a response, or a refused frame): a record of its own, logged as
        ``WS <path>`` with the status it ended with (200 unless the exchange says otherwise); yields it."""
        ua = ws.headers.get("user-agent", "")
        turn = Turn("WS", ws.path, client_name(ua), ua, status=200, request_id=getattr(ws, "request_id", ""))
        turn.route, turn.protocol = self._from_rule(ws.url_rule)
        turn.routed = True
        turn.on_change = self.push_state
        token = current_turn.set(turn)
        try:
            yield turn
        finally:
            current_turn.reset(token)
            self.end(turn)

    def routed(self, rule: Any) -> None:
        """The framework matched the request being answered to ``rule`` (None: no route); its handler has not
        run yet, so this is its arrival for the dashboard."""
        turn = current_turn.get()
        if turn is None:
            return
        turn.route, turn.protocol = self._from_rule(rule)
        turn.routed = True
        if turn.protocol not in QUIET_PROTOCOLS:
            self.push_state()

    def refused(self, code: str, param: str | None) -> None:
        """The request being answered is answered with an error: its code (else type) and the field it names."""
        turn = current_turn.get()
        if turn is not None:
            turn.error, turn.error_param = code, param

    def end(self, turn: Turn) -> None:
        if not turn.routed:  # it failed before the framework matched it: its route, matched here once
            turn.route, turn.protocol = self._route(turn.method, turn.path)
        if turn.status == 426 and turn.protocol == "none":  # a refused upgrade: the protocol that speaks HTTP there
            turn.route, turn.protocol = self._route("POST", turn.path)
        turn.duration = time.perf_counter() - turn.t0
        if turn.status is None:  # the client left before any answer went out (nothing failed here)
            turn.status = 499
        if turn.generated and turn.stop_reason is None and turn.error is not None:
            turn.stop_reason = "error"  # it was answered with an error before any event (a model that would not load)
        if turn.generated and turn.stop_reason is None:
            turn.cancelled()  # the client hung up mid-generation
        elif turn.generated and turn.stop_reason == "error":
            turn.count_decoded()  # it failed mid-generation: what it decoded was still decoded
        turn.count_unfinished()  # its other choices stopped with it (or cut while it finished): theirs too
        turn.source = None  # the window keeps counts, not the session (its prompt)
        self.metrics.observe(turn)
        self._log(turn)
        if self._kept(turn):
            self.window.append(turn)
            if turn.generated:
                self.generations.append(turn)
            self.publish("request", turn.as_dict())
            self.push_state()

    @staticmethod
    def _kept(turn: Turn) -> bool:
        if turn.protocol in QUIET_PROTOCOLS:
            return False
        return turn.generated or (turn.method == "POST" and (turn.status or 0) >= 400)

    @staticmethod
    def _from_rule(rule: Any) -> tuple[str, str]:
        if rule is None:  # NotFound, MethodNotAllowed, a redirect: not a route
            return "unmatched", "none"
        return rule.rule, rule.endpoint.split(":", 1)[0]

    def _route(self, method: str, path: str) -> tuple[str, str]:
        try:
            rule, _ = self.app.url_map.bind("localhost").match(path, method, return_rule=True)
        except Exception:  # NotFound, MethodNotAllowed, a redirect: not a route
            rule = None
        return self._from_rule(rule)

    def _log(self, turn: Turn) -> None:
        if turn.generated:
            detail = (f" model={turn.model} prompt={turn.prompt_tokens} cached={turn.cached_tokens} "
                      f"completion={turn.completion_tokens} ttft={_secs(turn.ttft)} stop={turn.stop_reason} "
                      f"tools={len(turn.tool_names)}{_cache_text(turn.cache_miss)}")
        else:  # a request refused once its model was known names it
            detail = f" model={turn.model}" if turn.model else ""
        if turn.error:
            detail += f" error={_printable(turn.error[:100])}"
            if turn.error_param:
                detail += f" param={_printable(turn.error_param[:200])}"
        path = _printable(turn.path)
        log.info("%s %s %s %s%s duration=%s client=%s ua=%s", turn.method, path, turn.status, turn.protocol,
                 detail, _secs(turn.duration), json.dumps(turn.client), json.dumps(turn.user_agent[:200]))
        if turn.tool_names:
            log.debug("%s %s tools offered: %s", turn.method, path, _printable(", ".join(turn.tool_names)))

    # -- what the routes read -----------------------------------------------------------------------------
    def profile(self) -> list[dict]:
        """The rolling window's timing snapshots, oldest first."""
        out = []
        for turn in self.generations:
            snapshot = turn.profile()
            if snapshot is not None:
                out.append({"id": turn.request_id, "time": turn.started, "protocol": turn.protocol,
                            "model": turn.model, "status": turn.status, "stop_reason": turn.stop_reason,
                            "ttft_s": turn.ttft, "tokens_per_second": turn.tokens_per_second, **snapshot})
        return out

    def recent(self) -> list[dict]:
        return [t.as_dict() for t in self.window]

    def state(self) -> dict:
        return engine_state(self.engine)

    # -- the live feed --------------------------------------------------------------------------------------
    def subscribe(self) -> trio.MemoryReceiveChannel:
        send, receive = trio.open_memory_channel(FEED_BUFFER)
        self._feeds[receive] = send
        return receive

    def unsubscribe(self, receive: trio.MemoryReceiveChannel) -> None:
        send = self._feeds.pop(receive, None)
        if send is not None:
            send.close()

    def publish(self, kind: str, data: Any) -> None:
        for receive, send in list(self._feeds.items()):
            try:
                send.send_nowait((kind, data))
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self.unsubscribe(receive)  # fallen behind, or gone: its stream ends, the page reconnects

    def push_state(self) -> None:
        if self._feeds:
            self.publish("state", self.state())
