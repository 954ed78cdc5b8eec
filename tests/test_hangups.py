"""Clients that hang up or stop reading, against the real command line (its own HTTP server settings): Ctrl-C
while a client holds a stream it does not read (a suspended client, a stuck pipe) still stops the server; a
client that closes its connection after its answer has it closed at once."""

from __future__ import annotations

import json
import signal
import socket
import time

from test_cli import start


def _gone(proc, seconds: float) -> bool:
    try:
        proc.wait(seconds)
        return True
    except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired)
        return False


def _generated(base: str) -> None:
    """Wait until no request is running (the answer is made, only its sending waits)."""
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
            if json.load(r)["running"] == 0:
                return
    raise AssertionError("the answer was not made within 60 s")


def test_ctrl_c_stops_the_server_while_a_client_does_not_read_its_stream(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(json.dumps(["word " * 400_000]))  # about 2 MB of answer: more than the socket buffers hold
    proc, model, base, _ = start(["--script", str(script), "--stream-interval", "0"])
    host, port = base.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
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
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(10)
    assert left <= 2, f"{left} of 30 closed connections still hold a file descriptor after the keep-alive time"
