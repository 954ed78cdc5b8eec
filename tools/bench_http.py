"""The benchmarks' streaming HTTP client (stdlib ``http.client``; not a test). The client shares the CPU with
the server it measures, so it must cost next to nothing per chunk: it timestamps every SSE event as it arrives
(``post_stream``) and reads plain JSON (``get_json``). Only the standard library is imported; nothing here
imports mlx."""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass, field


@dataclass
class StreamResult:
    t_send: float = 0.0
    t_first: float | None = None  # first chunk carrying generated output (content, reasoning or tool call)
    t_last: float | None = None
    chunks: int = 0
    usage: dict = field(default_factory=dict)
    text: str = ""
    reasoning: str = ""
    tool_calls: list = field(default_factory=list)  # OpenAI: accumulated tool calls; Anthropic: tool_use blocks
    blocks: list = field(default_factory=list)  # Anthropic content blocks, as a client would keep them
    finish: str | None = None
    status: int = 0
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_send


def _sse_events(resp):
    """(event name, data str) per SSE event, as lines arrive."""
    event, data = None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(b"data:"):
            data.append(line[5:].strip().decode())
        elif line.startswith(b"event:"):
            event = line[6:].strip().decode()


def get_json(port: int, path: str, timeout: float = 30) -> dict:
    """GET ``path`` from a server on loopback (with the key the benchmarks' servers would take, where they want
    one) and read its JSON body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"authorization": "Bearer x"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def post_stream(port: int, path: str, body: dict, headers: dict | None = None, timeout: float = 600,
                first=None) -> StreamResult:
    """POST a streaming request; timestamp each SSE event that carries output. ``first``: a threading.Event
    set when the first output arrives (for a caller waiting on streams run in other threads)."""
    payload = json.dumps(body).encode()
    hdrs = {"content-type": "application/json", "authorization": "Bearer x", "x-api-key": "x"}
    hdrs.update(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    r = StreamResult()
    r.t_send = time.perf_counter()
    conn.request("POST", path, body=payload, headers=hdrs)
    resp = conn.getresponse()
    r.status = resp.status
    if resp.status != 200:
        r.error = f"HTTP {resp.status}: {resp.read()[:500]!r}"
        conn.close()
        return r
    anthropic = path.startswith("/v1/messages")
    calls: dict[int, dict] = {}
    for event, data in _sse_events(resp):
        now = time.perf_counter()
        if data == "[DONE]":
            break
        d = json.loads(data)
        r.chunks += 1
        out = False
        if anthropic:
            kind = d.get("type")
            if kind == "message_start":
                r.usage.update(d["message"].get("usage") or {})
            elif kind == "content_block_start":
                block = dict(d["content_block"])
                r.blocks.append(block)
                if block.get("type") == "tool_use":
                    block["_json"] = ""
            elif kind == "content_block_delta":
                delta = d["delta"]
                block = r.blocks[d["index"]] if d["index"] < len(r.blocks) else {}
                if delta.get("type") == "text_delta" and delta.get("text"):
                    r.text += delta["text"]
                    block["text"] = block.get("text", "") + delta["text"]
                    out = True
                elif delta.get("type") == "thinking_delta" and delta.get("thinking"):
                    r.reasoning += delta["thinking"]
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
                    out = True
                elif delta.get("type") == "input_json_delta":
                    block["_json"] = block.get("_json", "") + delta.get("partial_json", "")
                    out = True
                elif delta.get("type") == "signature_delta":
                    block["signature"] = delta.get("signature", "")
            elif kind == "message_delta":
                r.usage.update(d.get("usage") or {})
                r.finish = (d.get("delta") or {}).get("stop_reason") or r.finish
            elif kind == "error":
                r.error = json.dumps(d)
        else:
            if "error" in d:
                r.error = json.dumps(d["error"])
            if d.get("usage"):
                r.usage = d["usage"]
            for ch in d.get("choices") or []:
                delta = ch.get("delta") or {}
                if delta.get("content"):
                    r.text += delta["content"]
                    out = True
                rc = delta.get("reasoning_content") or delta.get("reasoning")
                if rc:
                    r.reasoning += rc
                    out = True
                for tc in delta.get("tool_calls") or []:
                    c = calls.setdefault(tc.get("index", 0), {"id": None, "type": "function",
                                                              "function": {"name": "", "arguments": ""}})
                    c["id"] = tc.get("id") or c["id"]
                    fn = tc.get("function") or {}
                    c["function"]["name"] += fn.get("name") or ""
                    c["function"]["arguments"] += fn.get("arguments") or ""
                    out = True
                if ch.get("finish_reason"):
                    r.finish = ch["finish_reason"]
        if out:
            if r.t_first is None:
                r.t_first = now
                if first is not None:
                    first.set()
            r.t_last = now
    conn.close()
    if first is not None:
        first.set()  # ended without output: nobody waits forever
    r.tool_calls = [calls[i] for i in sorted(calls)]
    for b in r.blocks:
        if b.get("type") == "tool_use":
            raw = b.pop("_json", "")
            try:
                b["input"] = json.loads(raw) if raw.strip() else (b.get("input") or {})
            except ValueError:
                b["input"] = {"_raw": raw}
    return r
