"""Property-based fuzzing of every POST route's body (hypothesis): mutations of valid requests.

Shared by the suite (``test_fuzz_requests.py``, about a minute) and ``tools/fuzz_requests.py`` (as many
bodies as asked, with counts). A real ``tinytitan serve --script`` runs in a subprocess; each example picks a
route, starts from a valid request for it, and applies one to four mutations:

- a field dropped, set to null, retyped (any JSON type), or duplicated (the same key twice in the text);
- a value nested one list deeper (``"x"`` → ``["x"]``, ``["x"]`` → ``[["x"]]``: lists where strings belong);
- an optional field the base leaves out added (``raw``, ``suffix``, ``echo`` …): with drops, the
  combinations of missing-but-optional fields (``raw`` + ``suffix`` and no ``prompt``);
- a literal no JSON library writes: NaN / Infinity, an integer of thousands of digits, 1e400, a string of
  100k characters, nesting thousands deep, a lone surrogate escape;
- bytes that are not UTF-8 inside a string (a surrogate written as raw bytes, a stray continuation byte);
- ``stream`` switched on or off; the body replaced by non-JSON or cut short; a wrong content type;
- an image (every route that takes one carries one; the server reads images, ``--script-images``) replaced by
  damaged, truncated, oversized or unsupported data, bad base64, or a URL that is not a base64 data URL;
- the body compressed (``Content-Encoding`` zstd, gzip, deflate, br), the compressed bytes cut short, or an
  encoding the server does not know;
- a web page's headers: an ``Origin`` that is allowed (a loopback page) or not (another site, ``null``, one that
  does not parse), sometimes as a CORS preflight (``OPTIONS``); a ``Host`` with something after the name. A
  refused one must be a 403 in the route's envelope, an allowed one answered with
  ``Access-Control-Allow-Origin``.

Every answer must come within ``ANSWER_SECONDS`` (else: a hang), never be a 5xx, and — when it is an error —
be in its route's envelope (strictly, with the SDK models: tests/strict.py). The server must be idle and
healthy afterwards.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re
import subprocess
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import brotli
import httpx
import zstandard
from hypothesis import strategies as st

import strict

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tinytitan-scripted"
ANSWER_SECONDS = 15.0
SCRIPT = ["ok", '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', "<think>hmm</think>Fine.",
          'Quoted: <tool_call>{"name": "f", "arguments": {"q": "a </tool_call> b"}}</tool_call>']

_TOOL_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "q": {"type": "string"}}}
_MSGS = [{"role": "user", "content": "hi"}]


def _png(size=(4, 3)) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(out, "PNG")
    return out.getvalue()


# an image in every route that takes one (the server reads images: --script-images); the ``image`` mutation puts
# one of IMAGES_BAD in its place (as base64, or a whole URL where the base holds a data URL)
_IMAGE = base64.b64encode(_png()).decode()
_IMAGE_URL = "data:image/png;base64," + _IMAGE
IMAGES_BAD = [base64.b64encode(b).decode() for b in (
    b"not an image", _png()[:30], _png()[:-16] + b"\0" * 16, b"BM" + b"\0" * 60, _png((9000, 1)),
    b"GIF89a\xff\xff\xff\xff" + b"\0" * 20)] + ["!!!!", "", "A" * 7]
IMAGE_URLS_BAD = ["https://example.com/a.png", "file:///etc/passwd", "data:image/png,raw", "data:;base64,",
                  "data:text/plain;base64,aGk=", "data:image/png;base64,%%%", "javascript:alert(1)"]


@dataclass(frozen=True)
class Route:
    path: str
    base: dict
    envelope: str  # openai | anthropic | ollama
    method: str = "POST"
    not_implemented: bool = False  # refused by name (501) whatever the body: a 501 is its answer, not a failure
    optional: dict = field(default_factory=dict)  # fields the base leaves out, each with a valid value

    @property
    def headers(self) -> dict:
        return {"anthropic-version": "2023-06-01"} if self.envelope == "anthropic" else {}


ROUTES = [
    Route("/v1/chat/completions", {
        "model": MODEL, "max_tokens": 20, "stop": ["zz"], "temperature": 0.5, "stream": False,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": _TOOL_SCHEMA}}],
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
            {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": _IMAGE_URL, "detail": "low"}}]},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}, "openai"),
    Route("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 8, "stream": False, "stop": ["zz"]},
          "openai", optional={"suffix": "x", "echo": True, "stream_options": {"include_usage": True}, "seed": 1}),
    Route("/v1/responses", {
        "model": MODEL, "max_output_tokens": 20, "instructions": "be brief", "store": False, "stream": False,
        "reasoning": {"effort": "low"}, "text": {"verbosity": "low"},
        "tools": [{"type": "function", "name": "f", "parameters": _TOOL_SCHEMA}],
        "input": [{"type": "message", "role": "user", "content": "hi"},
                  {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": [
                      {"type": "input_text", "text": "ok"}, {"type": "input_image", "image_url": _IMAGE_URL}]}]},
          "openai", optional={"prompt_cache_options": {"comparison_response_id": "resp_missing", "mode": "implicit"}}),
    Route("/v1/responses/compact", {"model": MODEL, "input": [{"type": "message", "role": "user", "content": "hi"}],
                                    "instructions": "s"}, "openai"),
    Route("/v1/responses/input_tokens", {
        "model": MODEL, "instructions": "s", "truncation": "auto", "reasoning": {"effort": "low"},
        "tools": [{"type": "function", "name": "f", "parameters": _TOOL_SCHEMA}],
        "input": [{"type": "message", "role": "user", "content": "hi"},
                  {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}, "openai"),
    Route("/v1/responses/resp_missing/cancel", {}, "openai"),
    Route("/v1/messages", {
        "model": MODEL, "max_tokens": 50, "stop_sequences": ["zz"], "stream": False,
        "system": [{"type": "text", "text": "s"}], "tools": [{"name": "f", "input_schema": _TOOL_SCHEMA}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u"},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                         {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _IMAGE}}]},
                         {"type": "image", "source": {"type": "url", "url": _IMAGE_URL}}]}]},
          "anthropic", optional={"diagnostics": {"previous_message_id": "msg_missing"}}),
    Route("/v1/messages/count_tokens", {"model": MODEL, "messages": _MSGS, "system": "s"}, "anthropic"),
    Route("/v1/models/unload", {"model": MODEL}, "openai"),
    Route("/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi", "images": [_IMAGE]}],
                        "stream": False, "options": {"temperature": 0.2}}, "ollama"),
    Route("/api/generate", {"model": MODEL, "prompt": "hi", "stream": False}, "ollama",
          optional={"raw": True, "suffix": "x", "system": "s", "think": True, "images": [_IMAGE]}),  # (a format the script's text
          # cannot fit fails the request by design: engine/backends/scripted.py)
    Route("/v1/nope", {"model": MODEL}, "openai"),
    # (append new routes here: FIXED below names routes by their place in this list)
    Route("/v1/models/load", {"model": MODEL}, "openai"),
    Route("/api/show", {"model": MODEL, "verbose": True}, "ollama"),
    Route("/api/pull", {"model": "llama3", "stream": False}, "ollama", not_implemented=True),
    Route("/api/push", {"model": "me/llama3", "stream": False}, "ollama", not_implemented=True),
    Route("/api/create", {"model": "mine", "from": MODEL, "system": "s", "stream": False}, "ollama", not_implemented=True),
    Route("/api/copy", {"source": MODEL, "destination": "copy"}, "ollama", not_implemented=True),
    Route("/api/embed", {"model": MODEL, "input": ["hi"]}, "ollama", not_implemented=True),
    Route("/api/embeddings", {"model": MODEL, "prompt": "hi"}, "ollama", not_implemented=True),
    Route("/api/blobs/sha256:" + "ab" * 32, {"bytes": "GGUF"}, "ollama", not_implemented=True),
    Route("/v1/memories/trace_summarize", {"model": MODEL, "traces": [
        {"id": "t1", "metadata": {"source_path": "s.jsonl"},
         "items": [{"type": "message", "role": "user", "content": "hi"}]}]}, "openai"),
    Route("/v1/embeddings", {"model": MODEL, "input": "hi"}, "openai", not_implemented=True),
]


def route(path: str) -> Route:
    """The fuzz route of a path (for fixed cases that name their route)."""
    return next(r for r in ROUTES if r.path == path)

# literals a JSON library never writes (each stands for a value anywhere in the body)
RAW_LITERALS = ["NaN", "Infinity", "-Infinity", "9" * 4400, "-" + "1" * 5000, "1e400", "-0", "18446744073709551616",
                '"\\ud800"', '"x\\udfff"', '"' + "x" * 100_000 + '"', "[" * 3000 + "]" * 3000,
                '{"a":' * 2000 + "1" + "}" * 2000, '"\\u0000"']
BAD_BYTES = [b"\xed\xa0\x80", b"\xff", b"\xc3", b"\x80", b"\xf4\x90\x80\x80"]
CONTENT_TYPES = ["application/json", "application/json", "application/json", "text/plain",
                 "application/x-www-form-urlencoded", None, "application/json; charset=latin-1"]

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=6)


def paths(doc, here=()):
    """Every key / index path in a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield here + (k,)
            yield from paths(v, here + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield here + (i,)
            yield from paths(v, here + (i,))


class _Raw(str):
    """A value written into the body text as is (see ``encode``)."""


def _set(doc, path, value):
    node = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def _get(doc, path):
    node = doc
    for step in path:
        node = node[step]
    return node


def _drop(doc, path):
    node = doc
    for step in path[:-1]:
        node = node[step]
    del node[path[-1]]


def encode(doc) -> bytes:
    raws: list[str] = []

    def mark(value):
        if isinstance(value, _Raw):
            raws.append(str(value))
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(doc))
    text = re.sub(r'"\\u0000RAW(\d+)\\u0000"', lambda m: raws[int(m.group(1))], text)
    return text.encode("utf-8")


@dataclass
class Case:
    route: Route
    body: bytes
    content_type: str | None
    mutations: list[str] = field(default_factory=list)
    encoding: str | None = None  # the Content-Encoding the body was sent with (already applied to ``body``)
    headers: dict = field(default_factory=dict)  # a web page's (WEB_HEADERS), or none

    @property
    def method(self) -> str:
        return "OPTIONS" if "access-control-request-method" in self.headers else "POST"

    def describe(self) -> str:
        return (f"{self.method} {self.route.path} [{', '.join(self.mutations)}] {self.content_type} "
                f"{self.encoding or ''} {self.headers or ''}: {self.body[:300]!r}")


@st.composite
def cases(draw, routes=None) -> Case:
    route = draw(st.sampled_from(routes or ROUTES))
    doc = copy.deepcopy(route.base)
    done: list[str] = []
    text_ops: list[tuple] = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "retype", "null", "raw", "nest", "optional", "duplicate", "bad_bytes",
                                   "stream", "stream", "image"]))
        where = list(paths(doc))
        images = [p for p in where if _get(doc, p) in (_IMAGE, _IMAGE_URL)]
        if op == "image" and images:
            path = draw(st.sampled_from(images))
            bad = draw(st.sampled_from(IMAGES_BAD))
            if _get(doc, path) == _IMAGE_URL:
                bad = draw(st.sampled_from(IMAGE_URLS_BAD + ["data:image/png;base64," + bad]))
            _set(doc, path, bad)
            done.append(f"image {'.'.join(map(str, path))}")
        elif op == "optional" and route.optional:
            key = draw(st.sampled_from(sorted(route.optional)))
            doc[key] = copy.deepcopy(route.optional[key])
            done.append(f"add {key}")
        elif op == "nest" and where:
            path = draw(st.sampled_from(where))
            _set(doc, path, [_get(doc, path)])
            done.append(f"nest {'.'.join(map(str, path))}")
        elif op in ("drop", "retype", "null", "raw") and where:
            path = draw(st.sampled_from(where))
            if op == "drop":
                _drop(doc, path)
            elif op == "retype":
                _set(doc, path, draw(JSON_VALUES))
            elif op == "null":
                _set(doc, path, None)
            else:
                _set(doc, path, _Raw(draw(st.sampled_from(RAW_LITERALS))))
            done.append(f"{op} {'.'.join(map(str, path))}")
        elif op == "stream" and isinstance(doc, dict):
            doc["stream"] = draw(st.booleans())
            done.append(f"stream={doc['stream']}")
        elif op == "duplicate" and isinstance(doc, dict) and doc:
            key = draw(st.sampled_from(sorted(doc)))
            text_ops.append(("duplicate", key, encode(draw(JSON_VALUES))))
            done.append(f"duplicate {key}")
        elif op == "bad_bytes":
            text_ops.append(("bad_bytes", draw(st.sampled_from(BAD_BYTES))))
            done.append("bad bytes")
    body = encode(doc)
    for t in text_ops:
        if t[0] == "duplicate" and body.endswith(b"}") and len(body) > 2:
            body = body[:-1] + b', "' + t[1].encode() + b'": ' + t[2] + b"}"
        elif t[0] == "bad_bytes":
            at = body.find(b'"hi"')
            body = body[:at + 2] + t[1] + body[at + 2:] if at >= 0 else body + t[1]
    whole = draw(st.sampled_from(["as is"] * 8 + ["cut", "not json", "empty"]))
    if whole == "cut" and len(body) > 2:
        body = body[: draw(st.integers(1, len(body) - 1))]
    elif whole == "not json":
        body = draw(st.binary(max_size=64))
    elif whole == "empty":
        body = b""
    if whole != "as is":
        done.append(whole)
    coding = draw(st.sampled_from([None] * 6 + list(ENCODERS) + ["lzma"]))
    if coding in ENCODERS:
        body = ENCODERS[coding](body)
        if draw(st.integers(0, 3)) == 0 and len(body) > 2:
            body = body[: draw(st.integers(1, len(body) - 1))]
            done.append("compressed, cut")
    web = dict(draw(st.sampled_from([{}] * 12 + WEB_HEADERS)))
    if web.get("origin") is not None and draw(st.integers(0, 3)) == 0:
        web.update({"access-control-request-method": "POST", "access-control-request-headers": "content-type"})
    return Case(route, body, draw(st.sampled_from(CONTENT_TYPES)), done, coding, web)


ALLOWED_ORIGIN = "http://localhost:5173"
# what a browser adds (or an attacker's page, or a DNS rebinding) — each refused but the loopback page's
WEB_HEADERS = [{"origin": ALLOWED_ORIGIN}, {"origin": "http://[::1]:8080"}, {"origin": "null"},
               {"origin": "http://evil.example"}, {"origin": "https://localhost.evil.example"},
               {"origin": "http://[::1]evil.example"}, {"origin": "http://evil.example, http://localhost"},
               {"origin": ""}, {"host": "[::1]evil.example"}, {"host": "localhost:1:2"},
               {"host": "localhost@evil.example"}]


def refused_by_headers(headers: dict) -> bool:
    return ("host" in headers or headers.get("origin") is not None and
            headers["origin"] not in (ALLOWED_ORIGIN, "http://[::1]:8080"))


ENCODERS = {"zstd": lambda b: zstandard.ZstdCompressor().compress(b), "gzip": gzip.compress,
            "deflate": zlib.compress, "br": brotli.compress}

# fixed examples: the inputs that found defects (each must stay fixed)
FIXED = [
    Case(ROUTES[0], b'{"model":"tinytitan-scripted","messages":[],"max_tokens":' + b"9" * 4400 + b"}", "application/json"),
    Case(ROUTES[2], b'{"model":"tinytitan-scripted","input":"h\xed\xa0\x80i"}', "application/json"),
    Case(ROUTES[0], b'{"model":"tinytitan-scripted\xed\xa0\x80","messages":[{"role":"user","content":"hi"}]}',
         "application/json"),
    Case(ROUTES[0], b'{"model":"tinytitan-scripted","messages":[{"role":"user","content":"h\xed\xa0\x80i"}]}',
         "application/json"),
    Case(ROUTES[7], b'{"model":"\xed\xa0\x80"}', "application/json"),
    Case(ROUTES[7], b'{"model":' + b"1" * 5000 + b"}", "application/json"),
    Case(ROUTES[7], b"[]", "text/plain"),
    Case(ROUTES[4], b'{"x":"' + b"x" * (1 << 20) + b'"}', "application/json"),  # answered before the body
    Case(ROUTES[5], b'{"model":"tinytitan-scripted","max_tokens":NaN,"messages":[]}', "application/json"),
    Case(ROUTES[1], b'{"model":"tinytitan-scripted","prompt":"hi","stop":[["x"]]}', "application/json"),
    Case(ROUTES[9], b'{"model":"tinytitan-scripted","raw":true,"suffix":"x","stream":false}', "application/json"),
    Case(ROUTES[9], b'{"model":"tinytitan-scripted","suffix":"x","stream":false}', "application/json"),
]


@dataclass
class Outcome:
    status: int | None  # None: no answer within ANSWER_SECONDS (a hang) or a broken connection
    problem: str | None = None
    seconds: float = 0.0


def check(client: httpx.Client, base: str, case: Case) -> Outcome:
    headers = dict(case.route.headers)
    if case.content_type is not None:
        headers["content-type"] = case.content_type
    if case.encoding is not None:
        headers["content-encoding"] = case.encoding
    headers.update(case.headers)
    t0 = time.monotonic()
    try:
        r = client.request(case.method, base + case.route.path, content=case.body, headers=headers)
    except httpx.TimeoutException:
        return Outcome(None, "hang: no answer within %.0f s" % ANSWER_SECONDS, time.monotonic() - t0)
    except httpx.TransportError as exc:
        return Outcome(None, f"connection: {type(exc).__name__}: {exc}", time.monotonic() - t0)
    seconds = time.monotonic() - t0
    if refused_by_headers(case.headers) and r.status_code != 403:
        return Outcome(r.status_code, f"{case.headers} answered {r.status_code}, not refused: {r.text[:300]}",
                       seconds)
    if case.headers.get("origin") is not None and r.status_code != 403 and \
            r.headers.get("access-control-allow-origin") != case.headers["origin"]:
        return Outcome(r.status_code, "an allowed origin's answer without Access-Control-Allow-Origin", seconds)
    # a preflight is answered with the path's methods; where there is no route (/v1/nope) it is a 404 in the
    # envelope, checked below like any error
    if case.method == "OPTIONS" and r.status_code != 403 and r.status_code != 404:
        ok = r.status_code == 204 and "POST" in r.headers.get("access-control-allow-methods", "")
        return Outcome(r.status_code, None if ok else f"preflight answered {r.status_code}: {r.text[:300]}", seconds)
    if case.method == "OPTIONS" and r.status_code == 404 and case.route.path != "/v1/nope":
        return Outcome(r.status_code, f"preflight answered 404 on a route: {r.text[:300]}", seconds)
    if r.status_code >= 500 and not (r.status_code == 501 and case.route.not_implemented):
        return Outcome(r.status_code, f"{r.status_code}: {r.text[:300]}", seconds)
    if r.status_code >= 400:
        try:
            if case.route.envelope == "ollama":
                err = r.json()
                assert set(err) == {"error"} and isinstance(err["error"], str), err
            elif case.route.envelope == "anthropic":
                strict.anthropic_error(r.content)
            else:
                strict.openai_error(r.content)
        except (AssertionError, ValueError) as exc:
            return Outcome(r.status_code, f"not the route's envelope: {exc}"[:600], seconds)
    elif r.headers.get("content-type", "").startswith("text/event-stream") and case.route.path.startswith("/v1/"):
        try:
            strict.check_reply("POST", case.route.path, case.route.envelope == "anthropic", r.status_code,
                               r.headers["content-type"], r.content, tools_echo=False)
        except (AssertionError, ValueError) as exc:
            return Outcome(r.status_code, f"stream does not conform: {exc}"[:600], seconds)
    return Outcome(r.status_code, None, seconds)


def healthy(client: httpx.Client, base: str, within: float = 10.0) -> str | None:
    """None when /health answers and the engine is idle (nothing running or waiting) within ``within``."""
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        try:
            h = client.get(base + "/health").json()
            if h.get("running") == 0 and h.get("queue_depth", h.get("waiting", 0)) == 0:
                return None
            last = h
        except (httpx.HTTPError, ValueError) as exc:
            last = exc
        time.sleep(0.1)
    return f"not idle and healthy after {within} s: {last}"


class Server:
    """``tinytitan serve --script`` in a subprocess, on a free port."""

    def __init__(self, tmp: Path, extra_args=()):
        script = tmp / "fuzz-script.json"
        script.write_text(json.dumps(SCRIPT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tinytitan", "serve", "--script", str(script), "--script-images", "--port", "0",
             "--responses-store", "memory", "--log-level", "error", *extra_args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"is serving '[^']+' at (http://\S+)", line)
            if m:
                self.base = m.group(1)
                break
        else:
            self.close()
            raise AssertionError("server did not start:\n" + "".join(lines))
        if not hasattr(self, "base"):
            self.close()
            raise AssertionError("server did not start:\n" + "".join(lines))
        # drain its output so a chatty log never blocks it
        import threading

        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass
class Tally:
    total: int = 0
    statuses: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    hangs: int = 0
    server_errors: int = 0
    slowest: float = 0.0

    def add(self, case: Case, out: Outcome) -> None:
        self.total += 1
        self.statuses[out.status if out.status is None else f"{out.status // 100}xx"] += 1
        self.slowest = max(self.slowest, out.seconds)
        if out.status is None:
            self.hangs += 1
        elif out.status >= 500 and not (out.status == 501 and case.route.not_implemented):
            self.server_errors += 1
        if out.problem:
            self.problems.append(f"{out.problem}\n    {case.describe()}")


# -- the Responses WebSocket: the same cases, as frames on one socket -----------------------------------------
FRAME_FINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def as_frame(case: Case) -> str | bytes:
    """A Responses case as a client frame: a JSON object body gains ``"type": "response.create"``; a compressed
    body is sent as a binary frame (which the socket refuses); other bytes as text (invalid UTF-8 replaced)."""
    if case.encoding is not None:
        return case.body
    text = case.body.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        rest = text.lstrip()[1:]
        return '{"type": "response.create"' + ("," if rest.strip() not in ("}", "") else "") + rest
    return text


def check_frame(ws, case: Case) -> Outcome:
    """One frame on the socket: answered by a strictly valid response (never a server_error failure) or one
    error frame with a 4xx status, within ``ANSWER_SECONDS``."""
    frame = as_frame(case)
    t0 = time.monotonic()
    ws.send_bytes(frame) if isinstance(frame, bytes) else ws.send_text(frame)
    while True:
        try:
            event = json.loads(ws.receive_text(timeout=ANSWER_SECONDS))
        except Exception as exc:  # a timeout (a hang) or the socket closed on us
            return Outcome(None, f"no answer: {type(exc).__name__}: {exc}", time.monotonic() - t0)
        seconds = time.monotonic() - t0
        if event.get("type") == "error":
            if not isinstance(event.get("status"), int) or event["status"] >= 500:
                return Outcome(event.get("status"), f"error frame {event}"[:600], seconds)
            try:
                strict.openai_error({"error": event["error"]})
            except (AssertionError, ValueError) as exc:
                return Outcome(event["status"], f"error frame not in the envelope: {exc}"[:600], seconds)
            return Outcome(event["status"], None, seconds)
        try:
            strict.response_event(strict.without_tools(event))
        except (AssertionError, ValueError) as exc:
            return Outcome(200, f"frame does not conform: {exc}"[:600], seconds)
        if event["type"] in FRAME_FINAL:
            error = (event.get("response") or {}).get("error") or {}
            if event["type"] == "response.failed" and error.get("code") == "server_error":
                return Outcome(500, f"failed: {error}"[:600], seconds)
            return Outcome(200, None, seconds)
