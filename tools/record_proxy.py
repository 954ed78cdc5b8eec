#!/usr/bin/env python3
"""Record what a client (Claude Code, Codex, an SDK ...) sends to an LLM server.

Standalone: Python stdlib and the modules beside it (``record_canned.py``: the canned replies,
``record_log.py``: the record, ``record_asking.py``: forward mode's changes), plus ``httpx`` for the
forwarding mode. It listens on a local port and appends every
request it receives as one JSON line to ``--out``::

    {"seq": 1, "time": 1.234, "method": "POST", "path": "/v1/messages",
     "query": {"beta": ["true"]}, "headers": {...}, "body": {...}}

``time`` is seconds since the proxy started; header names are lower-cased and the
values of ``authorization``, ``x-api-key`` (and a few other credential headers) are
replaced by ``"<redacted>"``; ``body`` is the parsed JSON when the body is JSON,
otherwise the text (or ``null`` when empty); a gzip request body is recorded
decompressed (and forwarded as it came).

Two modes:

forward (``--upstream URL``)
    Every request (method, path+query, headers, body) is forwarded to the upstream
    server and its response (status, headers, body) is streamed back chunk by
    chunk as it arrives, so SSE streams stay streams.

canned (no ``--upstream``)
    The proxy answers by itself with a minimal valid reply, so a client can be
    driven with no model at all:

    - ``HEAD /``, ``GET /``                       200
    - ``GET /v1/models``, ``GET /models``       a model list (``--model`` id) readable as
                                                  both the OpenAI and the Anthropic shape
    - ``POST /v1/messages``                     Anthropic message saying "ok"
                                                  (SSE when ``"stream": true``, JSON otherwise)
    - ``POST /v1/messages/count_tokens``        ``{"input_tokens": <bytes/4>}``
    - ``POST /v1/responses``                    OpenAI Responses SSE with the full event
                                                  grammar (created, in_progress,
                                                  output_item.added, content_part.added,
                                                  output_text.delta/done, content_part.done,
                                                  output_item.done, completed), or JSON
    - ``POST /v1/chat/completions``             Chat Completions chunks + ``[DONE]``, or JSON
    - anything else                              404 with a JSON error

    ``--tool-call NAME=JSON`` makes the first model request of a conversation (one
    whose history holds no tool result yet) answer with a call of tool NAME with
    arguments JSON; once a tool result is present the reply is the text "ok".
    This shows whether the client really executes tool calls.

    In forward mode ``--tool-call NAME=JSON`` asks the upstream's model for that call
    instead: such a first request goes on with ``tool_choice`` naming NAME (one call,
    no parallel calls) and NAME's parameters narrowed to exactly JSON (each argument a
    ``const``, strict), so the server's own forced-call grammar makes its model write
    the call, whatever its weights. Later requests go on as sent. The record holds
    every request as the client sent it.

    ``--max-tokens N`` (forward mode) caps every model request's answer at N tokens
    (``max_tokens``, ``max_completion_tokens`` or ``max_output_tokens``, set where the
    client sent none): a random-weight model otherwise talks until it happens on its
    end token, thousands of tokens later.

    ``--fail STATUS[:COUNT]`` answers the first COUNT (default: all) model
    requests (POST /v1/messages, /v1/responses, /v1/chat/completions) with an
    error of that HTTP status (the Anthropic or OpenAI error envelope), to watch a
    client's retry policy. ``--delay S`` sleeps before each model reply.

Examples::

    # canned replies, record Claude Code
    python tools/record_proxy.py --port 8765 --out claude.jsonl &
    HOME=$(mktemp -d) ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=x \\
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 \\
      claude -p "say hi" --model canned --output-format stream-json --verbose

    # sit between a client and a real server
    python tools/record_proxy.py --port 8765 --upstream http://127.0.0.1:8000 --out codex.jsonl

    # make the client run a shell command
    python tools/record_proxy.py --port 8765 --out t.jsonl \\
      --tool-call 'Bash={"command": "echo hi", "description": "say hi"}'

Stop it with Ctrl-C (or SIGTERM). With ``--port 0`` the chosen port is printed on
stdout as ``listening on http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (also when loaded from a path, as tests do)

from record_asking import asking  # noqa: E402
from record_canned import Canned, error_body, new_id  # noqa: E402
from record_log import Recorder  # noqa: E402

# hop-by-hop headers never forwarded either way
HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}
MODEL_ROUTES = ("/v1/messages", "/v1/responses", "/v1/chat/completions")


# ---------------------------------------------------------------- HTTP handler


def make_handler(args, recorder: Recorder, canned: Canned, client):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "record_proxy"

        def log_message(self, fmt, *a):  # silence default access log
            pass

        def _read_body(self) -> bytes:
            if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("content-length") or 0)
            return self.rfile.read(n) if n else b""

        def _handle(self):
            raw = self._read_body()
            self.seq = recorder.record(self.command, self.path, self.headers, raw)
            try:
                if args.upstream:
                    self._forward(raw)
                else:
                    self._canned(raw)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

        # ---- helpers
        def _send(self, status: int, body: bytes, ctype: str = "application/json", extra=None):
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj, extra=None):
            self._send(status, json.dumps(obj).encode(), extra=extra)

        def _stream(self, chunks, status=200, ctype="text/event-stream", headers=None):
            self.send_response(status)
            for k, v in (headers or {"content-type": ctype, "cache-control": "no-cache"}).items():
                self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for c in chunks:
                if c:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        # ---- canned mode
        def _canned(self, raw: bytes):
            path = urlsplit(self.path).path.rstrip("/") or "/"
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            hdr = {"request-id": new_id("req_"), "openai-version": "2020-10-01"}
            if path == "/":
                return self._send(200, b"ok", "text/plain", hdr)
            if self.command == "GET" and path in ("/v1/models", "/models"):
                return self._json(200, canned.models(), hdr)
            if self.command == "GET" and path.startswith("/v1/models/"):
                m = canned.models()["data"][0]
                return self._json(200, {**m, "id": path.rsplit("/", 1)[1]}, hdr)
            if self.command == "POST" and path == "/v1/messages/count_tokens":
                return self._json(200, {"input_tokens": max(1, len(raw) // 4)}, hdr)
            if self.command == "POST" and path in MODEL_ROUTES:
                if args.delay:
                    time.sleep(args.delay)
                with recorder.lock:
                    fail = recorder.fails_left is None or recorder.fails_left > 0
                    if args.fail_status and fail and recorder.fails_left is not None:
                        recorder.fails_left -= 1
                if args.fail_status and fail:
                    return self._json(args.fail_status, error_body(path, args.fail_status), hdr)
                builder = {"/v1/messages": canned.anthropic, "/v1/responses": canned.responses,
                           "/v1/chat/completions": canned.chat}[path]
                kind, payload = builder(body)
                if kind == "json":
                    return self._json(200, payload, hdr)
                return self._stream(payload, headers={"content-type": "text/event-stream",
                                                      "cache-control": "no-cache", **hdr})
            return self._json(404, error_body(path, 404), hdr)

        # ---- forward mode
        def _forward(self, raw: bytes):
            url = args.upstream.rstrip("/") + self.path
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP]
            changing = args.tool or args.max_tokens
            if changing and self.command == "POST" and urlsplit(self.path).path in MODEL_ROUTES:
                raw = asking(urlsplit(self.path).path, raw, (self.headers.get("content-encoding") or "").lower(),
                             args.tool, args.max_tokens, self.seq)
            req = client.build_request(self.command, url, headers=headers, content=raw or None)
            try:
                resp = client.send(req, stream=True)
            except Exception as exc:  # upstream down: say so, as a 502
                return self._json(502, {"error": {"message": f"record_proxy upstream: {exc}",
                                                  "type": "upstream_error"}})
            try:
                out_headers = {k: v for k, v in resp.headers.items()
                               if k.lower() not in HOP and k.lower() != "content-encoding"}
                if self.command == "HEAD":
                    self.send_response(resp.status_code)
                    for k, v in out_headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", resp.headers.get("content-length", "0"))
                    self.end_headers()
                    return
                chunks = resp.iter_raw() if "content-encoding" not in resp.headers else resp.iter_bytes()
                if args.replies:
                    chunks = self._kept(chunks, resp)
                try:
                    self._stream(chunks, status=resp.status_code, headers=out_headers)
                finally:
                    if args.replies:
                        chunks.close()
            finally:
                resp.close()

        def _kept(self, chunks, resp):
            """The reply's chunks as they pass; the whole reply appended to ``--replies`` at its end."""
            return recorder.kept(args.replies, chunks, {
                "seq": self.seq, "method": self.command, "path": urlsplit(self.path).path,
                "anthropic": "anthropic-version" in self.headers, "status": resp.status_code,
                "content_type": resp.headers.get("content-type", "")})

    return Handler


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="record_proxy.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed)")
    p.add_argument("--out", help="append one JSON line per request to this file")
    p.add_argument("--upstream", help="forward to this base URL (e.g. http://127.0.0.1:8000); "
                                      "without it, answer with canned replies")
    p.add_argument("--model", default="canned", help="model id listed by GET /v1/models (canned)")
    p.add_argument("--text", default="ok", help="text of canned replies (default: ok)")
    p.add_argument("--tool-call", metavar="NAME=JSON",
                   help="first reply of a conversation calls tool NAME with args JSON (canned: the proxy's "
                        "reply; forward: the upstream's model, asked by a forced tool choice)")
    p.add_argument("--fail", metavar="STATUS[:COUNT]",
                   help="canned: answer the first COUNT (default all) model requests with STATUS")
    p.add_argument("--delay", type=float, default=0.0, help="canned: seconds before each model reply")
    p.add_argument("--max-tokens", type=int, metavar="N",
                   help="forward: cap every model request's answer at N tokens (a random-weight model otherwise "
                        "answers until it happens on its end token; the record holds the request as sent)")
    p.add_argument("--replies", help="forward: append one JSON line per complete reply to this file")
    p.add_argument("--timeout", type=float, default=600.0, help="upstream read timeout, seconds")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-request line on stderr")
    a = p.parse_args(argv)
    a.tool = None
    if a.tool_call:
        name, _, js = a.tool_call.partition("=")
        a.tool = (name, json.loads(js or "{}"))
    a.fail_status, a.fail_count = None, None
    if a.fail:
        s, _, c = a.fail.partition(":")
        a.fail_status, a.fail_count = int(s), (int(c) if c else None)
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    client = None
    if args.upstream:
        import httpx

        client = httpx.Client(timeout=httpx.Timeout(args.timeout, connect=10.0))
    recorder = Recorder(args.out, args.quiet)
    recorder.fails_left = args.fail_count
    canned = Canned(args.model, args.tool, args.text)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, recorder, canned, client))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    mode = f"forwarding to {args.upstream}" if args.upstream else "canned replies"
    print(f"listening on http://{host}:{port} ({mode})", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if client is not None:
            client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
