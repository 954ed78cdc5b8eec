"""Who may use the server: the Host header (DNS rebinding), the Origin of a browser's request (CORS preflights
answered for allowed origins only), and the API key — checked before any route runs."""

from __future__ import annotations

import hmac
import logging
import re
import uuid

from quart import Response, has_websocket_context, request, websocket
from werkzeug.exceptions import HTTPException

from ..errors import ApiError
from ..protocols.wire import Call
from ..speclang import template
from .origins import parse as parse_origin

log = logging.getLogger("tinytitan.http")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


OPEN_PATHS = ("/", "/health", "/dashboard")  # the dashboard page holds no data: its feed needs the key


def incoming():
    """What is being answered: the HTTP request, or a WebSocket upgrade (which has no HTTP request object; its
    method is GET)."""
    return websocket if has_websocket_context() else request


# a name or IPv4 address, or a bracketed IPv6 address; then an optional port, and nothing else
_HOST = re.compile(r"^(\[[0-9a-f:.]+\]|[^:\[\]/@\s]+)(?::\d{1,5})?$")


def host_name(header: str) -> str:
    """The host a Host header names, without its port; a header that is not ``host[:port]`` comes back whole
    (so it matches no allowed name: ``[::1]evil.example`` is not ``[::1]``)."""
    header = header.strip().lower()
    m = _HOST.match(header)
    return m.group(1) if m else header



class Guard:
    """The checks every request and upgrade passes first (a part of ``Server``, which holds the allowed hosts,
    origins and key)."""

    async def _guard(self):
        request = incoming()
        request.request_id = "req_" + uuid.uuid4().hex[:24]
        host = host_name(request.headers.get("host", ""))
        if host not in self.allowed:
            raise ApiError("permission", f"Host '{host}' is not allowed; start the server with "
                           f"--allowed-host {host} to allow it")
        origin = request.headers.get("origin")
        if origin is not None:
            preflight = self._origin(request, origin)
            if preflight is not None:
                return preflight
        if request.path not in OPEN_PATHS and not self.authorized(request):
            raise ApiError("authentication", "Invalid or missing API key (send 'Authorization: Bearer <key>' "
                           "or 'x-api-key: <key>')")
        plain_get = not has_websocket_context() and request.method in ("GET", "HEAD")  # (the routes' own methods:
        # any other, or an upgrade, is the router's 405 / 426, as with the key)
        if request.path == "/health" and not self.authorized(request) and plain_get:
            # the true status (503 when the model cannot generate); the model ids and queue figures need the key
            health = await self.shared.handlers()["health"](Call("GET", request.path))
            return self.json_response({"status": health.body["status"]}, health.status)
        if request.path == "/" and not self.authorized(request) and plain_get:
            headers = {k.lower(): v for k, v in request.headers.items()}
            root = await self.shared.handlers()["root"](Call(request.method, request.path, headers=headers))
            if isinstance(root.body, dict):  # (the JSON status; Ollama's text and the dashboard page hold no data)
                resp = self.json_response({k: v for k, v in root.body.items() if k != "model"}, root.status)  # (the
                resp.headers.update(root.headers)  # model id needs the key, as on /health; chosen by Accept all the same)
                return resp

    def _origin(self, req, origin: str) -> Response | None:
        """A web page's request: refused unless its origin is allowed (origins.py); an allowed preflight is
        answered here, before the key is asked for (a browser sends none with it)."""
        if not self.origins.allows(origin, req.headers.get("host", "")):
            hint = ("a sandboxed or local-file page cannot be allowed" if origin.strip() == "null" else
                    "it is not one scheme://host[:port] origin" if parse_origin(origin) is None else
                    f"start the server with --allowed-origin {origin.strip()} to allow it")
            raise ApiError("permission", f"Origin '{origin}' is not allowed: a web page from another site may not "
                           f"use this server; {hint}", code="origin_not_allowed")
        req.cors_origin = origin
        asked = req.headers.get("access-control-request-method")
        if has_websocket_context() or req.method != "OPTIONS" or not asked:
            return None
        try:
            methods = sorted(self.app.url_map.bind("localhost").allowed_methods(req.path))
        except HTTPException:
            methods = []
        if not methods:
            return None  # nothing is served here: the 404 says so
        resp = Response(b"", status=204)
        private = req.headers.get("access-control-request-private-network", "").lower() == "true"
        resp.headers.update(self.origins.preflight_headers(origin, methods,
                                                           req.headers.get("access-control-request-headers"), private))
        return resp

    def authorized(self, req) -> bool:
        """Whether a request may see what the API key guards (always, when there is no key)."""
        key = self.config.api_key
        if not key:
            return True
        auth = req.headers.get("authorization", "")
        offered = (req.headers.get("x-api-key") or "", auth[7:].strip() if auth.lower().startswith("bearer ") else "")
        # (in constant time: how long a refusal takes says nothing of how much of the key a guess had right)
        return any(hmac.compare_digest(given.encode(), key.encode()) for given in offered)

    async def _headers(self, response: Response | None) -> Response | None:
        if response is None:  # a WebSocket's handler that returned (the socket closed): no HTTP answer to dress
            return None
        ctx = {"request_id": getattr(incoming(), "request_id", "")}
        for proto in {id(p): p for p in (self.shared, self.owner())}.values():
            for k, v in proto.spec.headers.items():
                response.headers[k] = str(template.render(v, ctx))
        if has_websocket_context():  # a refused upgrade: the connection is done with (the server cannot reuse it)
            response.headers["connection"] = "close"
        elif getattr(incoming(), "cors_origin", None) is not None:  # an allowed page may read the answer
            for k, v in self.origins.cors_headers(incoming().cors_origin).items():
                if k == "Vary" and response.headers.get(k):  # (the answer's own Vary, GET /'s Accept, kept beside;
                    have = {f.strip().lower() for f in response.headers[k].split(",")}  # a preflight's names Origin)
                    if v.lower() not in have:
                        response.headers[k] = f"{response.headers[k]}, {v}"
                response.headers.setdefault(k, v)
        return response
