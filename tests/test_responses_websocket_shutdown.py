"""The real command stopped (SIGTERM, Ctrl-C) while Responses WebSockets are open (Codex holds one): each is
closed with 1001 (going away) and a reason, not cut (1006, which a client reads as a broken network). A socket
waiting for its next frame is closed at once; one whose response is in flight first has it end in the API's own
words, ``response.failed`` (as an HTTP stream's does at shutdown), and its generation ends."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest
from httpx_ws import WebSocketDisconnect, connect_ws

import strict
from cli_helpers import start

GOING_AWAY = 1001


def _closed(ws) -> tuple[list[dict], WebSocketDisconnect]:
    """The frames a socket receives until it is closed, and how it was closed."""
    frames = []
    with pytest.raises(WebSocketDisconnect) as closed:
        while True:
            frames.append(json.loads(ws.receive_text(timeout=15)))
    return frames, closed.value


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_open_sockets_are_closed_going_away_at_shutdown(tmp_path, sig):
    script = tmp_path / "s.yaml"
    script.write_text(json.dumps([{"output": "word " * 400, "delay_ms": 20}]))  # about 8 s of answer
    proc, model, base, _ = start(["--script", str(script)])
    url = base + "/v1/responses"
    try:
        with httpx.Client() as client, connect_ws(url, client) as idle, connect_ws(url, client) as busy:
            busy.send_text(json.dumps({"type": "response.create", "model": model, "input": "hi", "store": False}))
            first = [json.loads(busy.receive_text(timeout=15)) for _ in range(5)]  # (created, …, text deltas)
            proc.send_signal(sig)
            started = time.monotonic()
            idle_frames, idle_close = _closed(idle)
            busy_frames, busy_close = _closed(busy)
            took = time.monotonic() - started
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert idle_frames == []
    for close in (idle_close, busy_close):
        assert (close.code, close.reason) == (GOING_AWAY, "server shutting down"), close
    events = first + busy_frames
    for event in events:
        strict.response_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    ends = [e for e in events if e["type"] in ("response.completed", "response.failed", "response.incomplete")]
    assert ends == [events[-1]] and events[-1]["type"] == "response.failed", events[-1]
    assert "shutting down" in events[-1]["response"]["error"]["message"], events[-1]
    assert took < 3, took  # within the graceful time, not after a forced stop
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert "error=server_shutting_down" in out, out  # the generation in flight was ended, its place given back
