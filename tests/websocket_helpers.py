"""The WebSocket tests' helpers: the headers of an upgrade request, and the Responses socket's frames: a
response.create frame, the frames of one exchange (each validated strictly as a stream event), and the one
error frame of a refusal."""

from __future__ import annotations

import base64
import json
import os

import trio

import strict


MODEL = "tinytitan-scripted"
FINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def create(**body) -> str:
    return json.dumps({"type": "response.create", "model": MODEL, "store": False, **body})


async def turn(ws) -> list[dict]:
    """The frames of one exchange, up to its last (each frame strictly one stream event, or the error frame)."""
    frames = []
    with trio.fail_after(10):
        while True:
            frame = json.loads(await ws.receive_text())
            frames.append(frame)
            if frame["type"] in FINAL:
                break
    for frame in frames:
        if frame["type"] != "error":
            strict.response_event(frame)
    return frames


def error_of(frames: list[dict], status: int) -> dict:
    assert len(frames) == 1 and frames[0]["type"] == "error", frames
    frame = frames[0]
    assert set(frame) == {"type", "status", "error"} and frame["status"] == status, frame
    strict.openai_error({"error": frame["error"]})
    return frame["error"]


def upgrade_headers(**extra: str) -> dict:
    return {"connection": "Upgrade", "upgrade": "websocket", "sec-websocket-version": "13",
            "sec-websocket-key": base64.b64encode(os.urandom(16)).decode(), **extra}
