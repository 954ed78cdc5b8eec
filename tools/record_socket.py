#!/usr/bin/env python3
"""Record a client's WebSocket exchange with an LLM server (Codex's built-in provider dials
``GET /v1/responses`` with ``Upgrade: websocket``).

It listens on a local port, forwards each WebSocket to ``--upstream`` (same path and query, the client's
headers less the transport ones) and appends one JSON line per event to ``--out``::

    {"seq": 1, "time": 0.01, "event": "upgrade", "path": "/v1/responses", "headers": {...}}
    {"seq": 2, "time": 0.02, "event": "client", "frame": {"type": "response.create", ...}}
    {"seq": 3, "time": 0.31, "event": "server", "frame": {"type": "response.created", ...}}
    {"seq": 9, "time": 0.90, "event": "close", "by": "client"}

Frames are parsed JSON (a text frame that is not JSON is kept as ``"text"``, a binary one as its length);
credential headers are ``"<redacted>"``. A plain HTTP request is recorded (``"event": "http"``, method and
path) and answered 502: a client that falls back to HTTP shows in the trace. Needs trio, hypercorn, httpx and
httpx-ws (the test extras).

    python tools/record_socket.py --port 8766 --upstream http://127.0.0.1:8096 --out codex-ws.jsonl
"""

from __future__ import annotations

import argparse
import json
import time

import httpx
import trio
from httpx_ws import WebSocketDisconnect, aconnect_ws
from hypercorn.config import Config
from hypercorn.trio import serve
from wsproto.events import BytesMessage, TextMessage

REDACT = {"authorization", "x-api-key", "proxy-authorization", "cookie", "openai-organization", "chatgpt-account-id"}
NOT_FORWARDED = {"host", "connection", "upgrade", "sec-websocket-key", "sec-websocket-version",
                 "sec-websocket-extensions", "content-length"}


class Recorder:
    def __init__(self, out: str):
        self.out = open(out, "a", buffering=1)
        self.seq = 0
        self.t0 = time.monotonic()

    def write(self, **record) -> None:
        self.seq += 1
        self.out.write(json.dumps({"seq": self.seq, "time": round(time.monotonic() - self.t0, 3), **record}) + "\n")


def _frame(data: str | bytes):
    if isinstance(data, bytes):
        return {"binary": len(data)}
    try:
        return json.loads(data)
    except ValueError:
        return {"text": data}


def make_app(upstream: str, rec: Recorder):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["type"] == "http":
            rec.write(event="http", method=scope["method"], path=scope["path"])
            await send({"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"record_socket.py forwards WebSockets only\n"})
            return
        path = scope["path"] + (("?" + scope["query_string"].decode()) if scope.get("query_string") else "")
        rec.write(event="upgrade", path=scope["path"],
                  headers={k: ("<redacted>" if k in REDACT else v) for k, v in headers.items()})
        await receive()  # websocket.connect
        forwarded = {k: v for k, v in headers.items() if k not in NOT_FORWARDED}
        async with httpx.AsyncClient(timeout=None) as client:
            try:
                async with aconnect_ws(upstream + path, client, headers=forwarded) as ws:
                    await send({"type": "websocket.accept"})
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_downstream, ws, send, rec, nursery.cancel_scope)
                        while True:
                            message = await receive()
                            if message["type"] == "websocket.disconnect":
                                rec.write(event="close", by="client")
                                nursery.cancel_scope.cancel()
                                return
                            data = message.get("text") if message.get("text") is not None else message.get("bytes")
                            rec.write(event="client", frame=_frame(data))
                            await (ws.send_text(data) if isinstance(data, str) else ws.send_bytes(data))
            except WebSocketDisconnect:
                pass

    return app


async def _downstream(ws, send, rec: Recorder, cancel) -> None:
    try:
        while True:
            event = await ws.receive()
            if not isinstance(event, (TextMessage, BytesMessage)):
                continue  # pings and pongs: answered by the WebSocket layers on both sides
            text = event.data
            rec.write(event="server", frame=_frame(text))
            await send({"type": "websocket.send", **({"text": text} if isinstance(text, str) else {"bytes": text})})
    except WebSocketDisconnect:
        rec.write(event="close", by="server")
        await send({"type": "websocket.close", "code": 1000})
        cancel.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--upstream", required=True, help="the server, e.g. http://127.0.0.1:8096")
    ap.add_argument("--out", required=True, help="JSONL file to append the exchange to")
    args = ap.parse_args()
    rec = Recorder(args.out)
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None

    async def run():
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serve, make_app(args.upstream.rstrip("/"), rec), config)
            print(f"listening on {binds[0]}", flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()
