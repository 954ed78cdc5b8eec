"""What ``record_proxy.py`` writes down: each request as one JSON line (``--out``, credentials redacted, a gzip
body decompressed), and in forward mode each reply whole as it passed (``--replies``). Python stdlib only, like
the proxy."""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

REDACT = {
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "api-key",
    "openai-api-key",
    "anthropic-api-key",
    "cookie",
}


class Recorder:
    def __init__(self, path: str | None, quiet: bool):
        self.path = path
        self.quiet = quiet
        self.lock = threading.Lock()
        self.seq = 0
        self.t0 = time.monotonic()
        self.fails_left: int | None = None

    def record(self, method: str, target: str, headers, raw: bytes) -> int:
        parts = urlsplit(target)
        hdrs: dict[str, str] = {}
        for k, v in headers.items():
            k = k.lower()
            v = "<redacted>" if k in REDACT else v
            hdrs[k] = f"{hdrs[k]}, {v}" if k in hdrs else v
        body: object = None
        if raw and "gzip" in (headers.get("content-encoding") or "").lower():
            try:
                raw = gzip.decompress(raw)
            except OSError:
                pass
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        with self.lock:
            self.seq += 1
            line = {
                "seq": self.seq,
                "time": round(time.monotonic() - self.t0, 3),
                "method": method,
                "path": parts.path,
                "query": parse_qs(parts.query, keep_blank_values=True),
                "headers": hdrs,
                "body": body,
            }
            if self.path:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(line, ensure_ascii=False) + "\n")
            if not self.quiet:
                print(f"[{line['time']:8.3f}] #{self.seq} {method} {target} ({len(raw)} bytes)",
                      file=sys.stderr, flush=True)
            return self.seq

    def kept(self, out: str, chunks, line: dict):
        """A reply's chunks as they pass; the whole reply appended to ``out`` at its end: ``line`` (what the
        request and the reply's head were) with ``complete`` and ``body``."""
        body, complete = bytearray(), False
        try:
            for c in chunks:
                body += c
                yield c
            complete = True
        finally:  # a client that hangs up mid-stream: what passed, marked incomplete
            line = {**line, "complete": complete, "body": body.decode("utf-8", "replace")}
            with self.lock, open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
