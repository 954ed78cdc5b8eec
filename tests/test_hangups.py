"""Clients that hang up or stop reading, against the real command line (its own HTTP server settings): Ctrl-C
while a client holds a stream it does not read (a suspended client, a stuck pipe) still stops the server; a
client that closes its connection after its answer has it closed at once; the streams open when it stops end in
their protocols' own words."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request

import pytest

from cli_helpers import start


def _gone(proc, seconds: float) -> bool:
    try:
        proc.wait(seconds)
        return True
    except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired)
        return False


def _first_word(sock: socket.socket) -> None:
    """Read the stream until its first generated word: the request was admitted and is decoding (before that,
    no request running says nothing)."""
    seen = b""
    sock.settimeout(60)
    while re.search(rb'"content": ?"word', seen) is None:
        chunk = sock.recv(4096)
        assert chunk, f"the stream ended before its first word: {seen[-2000:]!r}"
        seen += chunk
    sock.settimeout(None)


def _generated(base: str) -> None:
    """Wait until no request is running (the answer is made, only its sending waits)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
            if json.load(r)["running"] == 0:
                return
        time.sleep(0.1)
    raise AssertionError("the answer was not made within 60 s")


def test_ctrl_c_stops_the_server_while_a_client_does_not_read_its_stream(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(json.dumps(["word " * 80_000]))  # over 10 MB of events: more than socket buffers hold
    proc, model, base, _ = start(["--script", str(script), "--stream-interval", "0"])
    host, port = base.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        _first_word(sock)  # (a few KB of the over 10 MB: the rest cannot fit in the socket's buffers)
        _generated(base)  # the answer is made; the server's sends now block on the full socket
        proc.send_signal(signal.SIGINT)
        stopped = _gone(proc, 12)  # the graceful shutdown cannot end (the send waits on the client); forced at 5 s
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate(timeout=10)
    assert stopped, "one Ctrl-C did not stop the server while a client held an unread stream"
    assert "Traceback" not in out, out


def test_connections_clients_closed_are_let_go_within_the_keep_alive_time(tmp_path):
    """A client that closes its connection as soon as it has read the answer (curl, a health checker, a script
    making one connection a request): hypercorn holds it (CLOSE-WAIT, one descriptor) until the keep-alive
    timer ends, so the command line keeps that short and asks for more descriptors than a 1024 default."""
    import os

    from tinytitan.serve import KEEP_ALIVE_S, OPEN_FILES

    script = tmp_path / "s.yaml"
    script.write_text(json.dumps(["ok"]))
    proc, model, base, _ = start(["--script", str(script)])
    host, port = base.removeprefix("http://").rsplit(":", 1)
    try:
        limits = open(f"/proc/{proc.pid}/limits").read()
        soft, hard = next(line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files"))
        assert int(soft) >= min(OPEN_FILES, int(hard)), limits
        time.sleep(1)
        before = len(os.listdir(f"/proc/{proc.pid}/fd"))
        for _ in range(30):
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
                data = b""
                while b"\r\n\r\n" not in data:
                    data += sock.recv(65536)
                head, rest = data.split(b"\r\n\r\n", 1)
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(rest) < length:
                    rest += sock.recv(65536)
        deadline = time.monotonic() + KEEP_ALIVE_S + 5
        while time.monotonic() < deadline:
            left = len(os.listdir(f"/proc/{proc.pid}/fd")) - before
            if left <= 2:
                break
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(10)
    assert left <= 2, f"{left} of 30 closed connections still hold a file descriptor after the keep-alive time"


SHUTDOWN_STREAMS = {  # (path, body less the model, how the stream's last event must end it)
    "openai_chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
    "openai_completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 4000, "stream": True}),
    "openai_responses": ("/v1/responses", {"input": "hi", "stream": True}),
    "anthropic_messages": ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000,
                                            "stream": True}),
    "ollama_chat": ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
    "ollama_generate": ("/api/generate", {"prompt": "hi"}),
    "folded": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
}


def _ended_in_protocol_terms(name: str, status: int, text: str) -> None:
    import strict

    shutting = "server_shutting_down"
    if name == "folded":  # an answer not streamed: the protocol's error, the server's state by its status
        assert status == 503 and json.loads(text)["error"]["code"] == shutting, (status, text)
        return
    assert status == 200, (status, text)
    if name.startswith("ollama"):
        last = json.loads(text.strip().splitlines()[-1])
        assert set(last) == {"error"} and "shutting down" in last["error"], text
        return
    blocks = [b for b in text.split("\n\n") if b.strip()]
    data = json.loads(blocks[-1].split("data: ", 1)[1]) if name not in ("openai_chat", "openai_completions") \
        else None
    if name in ("openai_chat", "openai_completions"):
        assert blocks[-1] == "data: [DONE]", text[-500:]
        assert json.loads(blocks[-2].removeprefix("data: "))["error"]["code"] == shutting, text[-500:]
    elif name == "openai_responses":
        assert blocks[-1].startswith("event: response.failed"), text[-500:]
        strict.response_event(data)
        error = data["response"]["error"]  # (its code is one the SDK's enum holds)
        assert error["code"] == "server_error" and "shutting down" in error["message"], data
    else:
        assert blocks[-1].startswith("event: error") and data["type"] == "error", text[-500:]
        assert "shutting down" in data["error"]["message"], data


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_streams_open_at_shutdown_end_in_their_protocols_own_words(tmp_path, sig):
    """Stopping the server while streams are open (one decoding, the others waiting in the queue: the scripted
    backend decodes one at a time): each ends with its protocol's error event and terminator, and an answer not
    streamed is its protocol's 503, within the graceful time, rather than a connection cut mid-body (which the
    SDKs report as a broken network, not as an error the API sent)."""
    import threading

    import httpx

    script = tmp_path / "s.yaml"
    script.write_text(json.dumps([{"output": "word " * 2000, "delay_ms": 20}]))  # about 40 s of answer
    proc, model, base, _ = start(["--script", str(script)])
    got: dict = {}

    def client(name: str, path: str, body: dict) -> None:
        try:
            with httpx.Client(timeout=30) as c:
                with c.stream("POST", base + path, json={"model": model, **body},
                              headers={"anthropic-version": "2023-06-01"}) as r:
                    got[name] = (r.status_code, r.read().decode())
        except httpx.HTTPError as exc:
            got[name] = (None, repr(exc))

    threads = [threading.Thread(target=client, args=(name, *v)) for name, v in SHUTDOWN_STREAMS.items()]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every one is admitted: one decoding, the others queued
            with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                health = json.load(r)
            if (health["running"], health["waiting"]) == (1, len(SHUTDOWN_STREAMS) - 1):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"not all admitted: {health}")
        proc.send_signal(sig)
        started = time.monotonic()
        for t in threads:
            t.join(20)
        took = time.monotonic() - started
        stopped = _gone(proc, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate(timeout=10)
    assert stopped and took < 3, took
    assert set(got) == set(SHUTDOWN_STREAMS), got
    for name, (status, text) in got.items():
        _ended_in_protocol_terms(name, status, text)
    assert "Traceback" not in out and " ERROR " not in out, out
