"""HTTP/1.1 over a raw socket, for what a client library hides: several requests on one keep-alive
connection, a body the server answers before reading, whether the server closes the connection."""

from __future__ import annotations

import trio


class RawConnection:
    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.buf = b""

    @classmethod
    async def open(cls, base: str) -> "RawConnection":
        host, port = base.removeprefix("http://").rsplit(":", 1)
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def send(self, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> None:
        head = {"Host": "localhost", "Content-Length": str(len(body)), **(headers or {})}
        lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        await self.stream.send_all(f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode() + body)

    async def _more(self) -> bool:
        chunk = await self.stream.receive_some(1 << 16)
        self.buf += chunk
        return bool(chunk)

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        """One response (Content-Length bodies only); raises EOFError when the server closed first."""
        while b"\r\n\r\n" not in self.buf:
            if not await self._more():
                raise EOFError(f"connection closed before a response; got {self.buf[:200]!r}")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            if not await self._more():
                raise EOFError("connection closed inside a response body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return int(status_line.split()[1]), headers, body

    async def closed(self) -> bool:
        """Whether the server has closed its side (reads EOF), with nothing more sent."""
        try:
            return not await self._more()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return True
