"""Responses over a WebSocket: ``GET /v1/responses`` with ``Upgrade: websocket`` (Codex's built-in provider,
OpenAI's WebSocket mode). What the frames mean is declared in spec/openai_responses.yaml (``extra.websocket``).

Rules:
- Frames are read one at a time: a ``response.create`` runs its whole response (every event sent) before the
  next frame is read, so one response is in flight per connection and turns run in order.
- A ``response.create`` is the HTTP body plus ``type`` (and ``generate``): the same request table checks it and
  refuses by name, the same handler answers it (openai_responses.py), with the connection's own responses for
  ``previous_response_id`` and the stream framed one event per text frame.
- A frame refused before its response starts (bad JSON, an unknown type, a refused field, a full queue, a frame
  the socket itself refused) is answered with one error frame, and the connection stays open for the next.
  A failure once the response has started is the response's own ``response.failed``; an unexpected error
  before it is logged and answered as a 500 error frame, as over HTTP.
- Each exchange runs in ``conn.turn()``: the engine session of its response ends with it. A client that closes
  the socket mid-response cancels the exchange: the generation stops and its place is freed at once.
"""

from __future__ import annotations

import json
import logging
from contextlib import aclosing
from typing import Any

from ..errors import ApiError, invalid
from ..memo import BoundedMemo
from ..speclang import template
from .wire import Call, Connection

FRAMING = "websocket"
log = logging.getLogger("tinytitan.responses")


class LocalResponses:
    """A connection's own responses (StoredResponse records), newest ``keep`` kept: what ``previous_response_id``
    reads first, whatever the request's ``store`` said."""

    def __init__(self, keep: int):
        self.keep = keep
        self._records: BoundedMemo[str, Any] = BoundedMemo(keep)  # by id, a record read or put the newest

    def get(self, response_id: str):
        return self._records.get(response_id)

    def put(self, rec) -> None:
        self._records.put(rec.id, rec)


def error_frame(proto, err: ApiError) -> tuple[int, str]:
    """(status, frame text) for a refusal: the status and the envelope's error object the same refusal gets over
    HTTP, in the spec's ``error_frame``."""
    status, body = proto.error_response(err)
    error = body.get("error", body) if isinstance(body, dict) else body
    frame = template.render(proto.spec.extra["websocket"]["error_frame"], {"status": status, "error": error})
    return status, json.dumps(frame, ensure_ascii=False)


async def serve(proto, call: Call, conn: Connection) -> None:
    """The connection's life: frames in, one exchange each, until the client leaves or goes quiet."""
    conf = proto.spec.extra["websocket"]
    local = LocalResponses(int(conf.get("keep_responses", 64)))
    while True:
        try:
            text = await conn.receive()
        except ApiError as err:  # a frame the socket refused (binary, too large): said in band, then the next
            async with conn.turn():
                await _refuse(proto, conn, err)
            continue
        if text is None:
            return
        async with conn.turn():
            try:
                await _exchange(proto, call, conn, text, local, conf)
            except ApiError as err:
                await _refuse(proto, conn, err)
            except Exception as exc:  # a bug, not the client's doing: said in band as HTTP says it (a 500)
                log.exception("WebSocket exchange failed")
                await _refuse(proto, conn, ApiError("server_error", f"internal error: {type(exc).__name__}: {exc}"))


async def _refuse(proto, conn: Connection, err: ApiError) -> None:
    status, frame = error_frame(proto, err)
    conn.status(status)
    await conn.send(frame)


async def _exchange(proto, call: Call, conn: Connection, text: str, local: LocalResponses, conf: dict) -> None:
    create, processed, prewarm = conf["create"], conf["processed"], conf["prewarm_field"]
    frame = proto.validator.parse_json(text)  # as an HTTP body is read: the same refusals (depth, NaN, long ints)
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise invalid(f"A frame must be a JSON object with a string 'type' ('{create}' or '{processed}')",
                      param="type", code="missing_required_parameter")
    kind = frame["type"]
    if kind == processed:
        if not isinstance(frame.get("response_id"), str):
            raise invalid(f"'{processed}' needs a string 'response_id'", param="response_id",
                          code="missing_required_parameter")
        return  # the client has read that response: nothing to answer
    if kind != create:
        raise invalid(f"Unknown frame type '{kind}': this socket takes '{create}' and '{processed}'", param="type",
                      code="invalid_value")
    generate = frame.get(prewarm, True)
    if not isinstance(generate, bool):
        raise invalid(f"Invalid type for '{prewarm}': expected a boolean, got {json.dumps(generate)}", param=prewarm,
                      code="invalid_type")
    if frame.get("stream") is not None and not isinstance(frame["stream"], bool):  # (not used: but not a wrong one)
        raise invalid(f"Invalid type for 'stream': expected a boolean, got {json.dumps(frame['stream'])}",
                      param="stream", code="invalid_type")
    body = {k: v for k, v in frame.items() if k not in ("type", prewarm)}
    body["stream"] = True  # a socket's response is always its events
    request = Call("POST", call.path, call.headers, call.query, json.dumps(body).encode())
    reply = await proto.generate(request, local, FRAMING, prewarm=not generate)
    assert reply.stream is not None
    async with aclosing(reply.stream) as chunks:
        async for chunk in chunks:
            await conn.send(chunk.decode())
