"""A generation that failed before its first event (a model that will not load) is logged and shown as failed,
with the error's code, folded or streamed: never as a client that hung up (``stop=cancelled``)."""

from __future__ import annotations

import logging

import httpx
import pytest

from observe_helpers import eventually
from catalog_helpers import USER, DamagedWeights
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

ROUTES = [("/v1/chat/completions", "openai_chat", {}),
          ("/v1/messages", "anthropic_messages", {"anthropic-version": "2023-06-01"})]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path,protocol,headers", ROUTES)
async def test_a_model_that_will_not_load_is_logged_as_a_failure(serve, demo_tok, caplog, path, protocol, headers,
                                                                   stream):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    good = ScriptedBackend([ScriptEntry("hello")], demo_tok, model_id="good")
    s = await serve(backend=[good, DamagedWeights([ScriptEntry("never")], demo_tok, model_id="damaged")])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json={"model": "damaged", "stream": stream, "max_tokens": 10, "messages": USER},
                         headers=headers)
    assert r.status_code == (200 if stream else 500) and "cannot be loaded" in r.text

    async def logged():
        return [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.requests"
                and f"POST {path}" in rec.getMessage()]

    (line,) = await eventually(logged)
    assert f" {protocol} model=damaged " in line and "error=model_load_failed" in line, line
    assert "stop=error" in line and "cancelled" not in line, line
    (turn,) = s.server.observer.recent()
    assert turn["stop_reason"] == "error" and turn["model"] == "damaged"
