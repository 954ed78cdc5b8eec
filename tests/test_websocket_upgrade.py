"""A WebSocket upgrade on a path that takes none is answered in the owning protocol's envelope — 426 where
the path speaks plain HTTP (Codex then falls back to HTTP after one attempt), 404 where nothing is served —
never a 500. The refusal closes the connection, and the server goes on answering others."""

from __future__ import annotations

import logging

import httpx
import pytest
import trio

import strict
from websocket_helpers import upgrade_headers


@pytest.mark.parametrize("path, status, envelope", [
    ("/v1/chat/completions", 426, "openai"), ("/v1/completions", 426, "openai"), ("/v1/models", 426, "openai"),
    ("/v1/responses/compact", 426, "openai"), ("/v1/messages", 426, "anthropic"), ("/api/chat", 426, "ollama"),
    ("/nothing/here", 404, "openai"), ("/v1/nothing", 404, "openai"),
])
async def test_an_upgrade_where_none_is_taken_is_refused_in_the_envelope(serve, caplog, path, status, envelope):
    server = await serve(["hi"])
    async with httpx.AsyncClient() as client:
        r = await client.get(server.url(path), headers=upgrade_headers())
        assert r.status_code == status, r.text
        assert r.headers["connection"] == "close"
        assert r.headers["x-request-id"].startswith("req_")
        body = r.json()
        if envelope == "openai":
            strict.openai_error(body)
            assert body["error"]["code"] == ("upgrade_required" if status == 426 else "not_found")
            assert path in body["error"]["message"]
        elif envelope == "anthropic":
            strict.anthropic_error(body)
        else:
            assert set(body) == {"error"} and path in body["error"]
        # the same client goes on: the refused upgrade left nothing behind
        assert (await client.get(server.url("/health"))).status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_an_upgrade_passes_the_host_and_key_checks(serve):
    server = await serve(["hi"], api_key="k")
    async with httpx.AsyncClient() as client:
        r = await client.get(server.url("/v1/chat/completions"), headers=upgrade_headers())
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = await client.get(server.url("/v1/chat/completions"), headers=upgrade_headers(host="evil.example"))
        assert r.status_code == 403


async def test_an_upgrade_is_logged_like_a_request(serve, caplog):
    server = await serve(["hi"])
    caplog.set_level(logging.INFO, "tinytitan.requests")
    async with httpx.AsyncClient() as client:
        await client.get(server.url("/v1/chat/completions"), headers=upgrade_headers())
    with trio.fail_after(20):  # the record ends once the server has closed the connection
        while not (lines := [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests"]):
            await trio.sleep(0.01)
    assert any(line.startswith("GET /v1/chat/completions 426 openai_chat ") for line in lines), lines
