"""Which web pages may use the server: the ``Origin`` allow-list, and the CORS answers that go with it.

A browser tab can reach a loopback server: a WebSocket is not subject to CORS, and a ``text/plain`` POST is a
CORS "simple request" sent without a preflight. The browser says which page sent a request in ``Origin``; CLIs
and SDKs send none. So:

Rules:
- No ``Origin``: not a browser's cross-origin request; the Origin rules do not apply.
- Allowed: loopback origins on any port (``http(s)://127.0.0.1``, ``localhost``, ``[::1]``), the server's own
  origin (a page it served itself: the Origin names the Host the request was sent to), and the origins the user
  allows (``--allowed-origin``, ``TINYTITAN_ALLOWED_ORIGINS``: ``scheme://host[:port]``, ``scheme://host:*`` for
  any port, ``scheme://*`` for any origin of a scheme — a desktop app's ``app://*``, an editor's
  ``vscode-webview://*`` — or ``*`` for every origin).
- Anything else is refused with 403, ``Origin: null`` (a sandboxed frame, a ``file:`` page) and an Origin that
  does not parse included — for every route and for every WebSocket upgrade.
- A CORS preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is answered 204
  with the methods the path serves, the headers asked for and, when asked, private-network access (an allowed
  public site reaching a loopback server); a refused origin gets the 403.
- The answer to an allowed cross-origin request carries ``Access-Control-Allow-Origin`` (and ``Vary: Origin``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
ENV_VAR = "TINYTITAN_ALLOWED_ORIGINS"
PREFLIGHT_MAX_AGE = "600"
DEFAULT_PORTS = {"http": "80", "https": "443"}
# scheme "://" host [":" port]: a host is a name, an IPv4 address or a bracketed IPv6 address
_ORIGIN = re.compile(r"^([a-z][a-z0-9+.-]*)://(\[[0-9a-f:.]+\]|[a-z0-9._-]+|\*)(?::(\d{1,5}|\*))?$")


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: str | None  # None: the scheme's default port; "*": any port (only in an allow-list entry, as host "*")

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port else "")


def parse(value: str, pattern: bool = False) -> Origin | None:
    """An Origin header's value (or, with ``pattern``, an allow-list entry, which may end in ``:*``); None when
    it is not ``scheme://host[:port]``. Scheme and host are compared case-insensitively; a scheme's default
    port is the same as none."""
    m = _ORIGIN.match(value.strip().lower())
    if m is None:
        return None
    scheme, host, port = m.groups()
    if "*" in (host, port) and not pattern:
        return None
    if port not in (None, "*"):
        number = int(port)
        if number > 65535:
            return None
        port = None if DEFAULT_PORTS.get(scheme) == str(number) else str(number)
    return Origin(scheme, host, port)


def allow_list(entries) -> tuple[Origin | str, ...]:
    """The user's allowed origins, checked: ``*``, ``scheme://host[:port]``, ``scheme://host:*`` or ``scheme://*``.
    Entries may be comma-separated (as the environment variable gives them). Raises ValueError naming a bad one."""
    out: list[Origin | str] = []
    for entry in entries:
        for item in str(entry).split(","):
            item = item.strip().rstrip("/")
            if not item:
                continue
            if item == "*":
                out.append("*")
                continue
            origin = parse(item, pattern=True)
            if origin is None:
                raise ValueError(f"allowed origin {item!r} is not scheme://host[:port] (or scheme://host:* for "
                                 "any port, scheme://* for any host, or * for every origin)")
            out.append(origin)
    return tuple(out)


class OriginPolicy:
    def __init__(self, allowed=()):
        self.allowed = allow_list(allowed)

    def allows(self, value: str, host_header: str) -> bool:
        """Whether a request whose ``Origin`` header is ``value``, sent to ``host_header``, may be answered."""
        if "*" in self.allowed:
            return True
        origin = parse(value)
        if origin is None:  # "null", a list of origins, anything malformed
            return False
        if origin.scheme in ("http", "https") and origin.host in LOOPBACK_NAMES:
            return True
        if origin.scheme in ("http", "https") and _same_host(origin, host_header):
            return True  # the server's own pages (the dashboard, reached by whatever allowed name)
        for entry in self.allowed:
            if entry.scheme != origin.scheme:
                continue
            if entry.host == "*" or (entry.host == origin.host and entry.port in ("*", origin.port)):
                return True  # (``scheme://*``: any origin of the scheme, whatever its port)
        return False

    @staticmethod
    def cors_headers(origin: str) -> dict[str, str]:
        """What the answer to an allowed cross-origin request carries, so the page may read it."""
        return {"Access-Control-Allow-Origin": origin.strip(), "Access-Control-Expose-Headers": "*",
                "Vary": "Origin"}

    @staticmethod
    def preflight_headers(origin: str, methods: list[str], request_headers: str | None,
                          private_network: bool = False) -> dict[str, str]:
        """The answer to an allowed preflight: the methods the path serves, the headers the page asked to send,
        and — where a public page asks to reach this private address (Chrome's Private Network Access) — yes."""
        out = {"Access-Control-Allow-Origin": origin.strip(), "Access-Control-Allow-Methods": ", ".join(methods),
               "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
               "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"}
        if request_headers:
            out["Access-Control-Allow-Headers"] = request_headers.strip()
        if private_network:
            out["Access-Control-Allow-Private-Network"] = "true"
        return out


def _same_host(origin: Origin, host_header: str) -> bool:
    """Whether an Origin names the host (and port) the request was sent to: the server's own page."""
    own = parse(f"{origin.scheme}://{host_header}")
    return own is not None and (own.host, own.port) == (origin.host, origin.port)
