"""A ``response.create`` frame's ``stream`` is not used (a socket's response is always its events), but a
wrong one is refused by name, as over HTTP, not silently overwritten."""

from __future__ import annotations

import httpx
from httpx_ws import aconnect_ws

from websocket_helpers import create, error_of, turn


async def test_a_wrong_stream_is_refused_by_name(serve):
    server = await serve(["ok", "ok"])
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="hi", stream="yes"))
            err = error_of(await turn(ws), 400)
            assert err["param"] == "stream" and err["code"] == "invalid_type"
            await ws.send_text(create(input="hi", stream=False))  # a boolean: not used, as on the API
            assert (await turn(ws))[-1]["type"] == "response.completed"


async def test_a_null_stream_is_taken_as_over_http(serve):
    server = await serve(["ok"])
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="hi", stream=None))  # (HTTP answers the same body: 200)
            assert (await turn(ws))[-1]["type"] == "response.completed"
