"""The log line (and the dashboard's row) of a request refused once its model was known names that model: a prompt
past the model's window, a full queue. On a server of several models an operator sees which one refused."""

from __future__ import annotations

import functools
import logging

import httpx
import trio

from observe_helpers import eventually
from tinytitan.engine.backends.scripted import SCRIPTED_CONTEXT_WINDOW, ScriptedBackend, ScriptEntry


def lines(caplog, path: str, status: int) -> list[str]:
    return [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.requests"
            and rec.getMessage().startswith(f"POST {path} {status} ")]


async def test_a_prompt_past_the_window_is_logged_with_its_model(serve, demo_tok, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    small = ScriptedBackend([ScriptEntry("hi")], demo_tok, model_id="small")
    other = ScriptedBackend([ScriptEntry("hi")], demo_tok, model_id="other")
    s = await serve(backend=[small, other])
    long = "word " * (SCRIPTED_CONTEXT_WINDOW + 10)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"),
                         json={"model": "other:latest", "messages": [{"role": "user", "content": long}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"

    async def logged():
        return lines(caplog, "/v1/chat/completions", 400)

    (line,) = await eventually(logged)
    assert " model=other " in line and "error=context_length_exceeded" in line, line
    (row,) = s.server.observer.recent()
    assert row["model"] == "other" and row["status"] == 400


async def test_a_full_queue_is_logged_with_its_model(serve, demo_tok, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve(backend=ScriptedBackend([ScriptEntry("word " * 200, delay_ms=10)] * 2, demo_tok,
                                            model_id="busy"), max_queue=0)
    async with httpx.AsyncClient(timeout=30) as c:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(c.post, s.url("/v1/chat/completions"), json={
                "model": "busy", "messages": [{"role": "user", "content": "talk"}]}))
            while s.engine.running == 0:
                await trio.sleep(0.01)
            r = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"},
                             json={"model": "busy", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]})
            nursery.cancel_scope.cancel()
    assert r.status_code in (429, 529), r.text

    async def logged():
        return lines(caplog, "/v1/messages", r.status_code)

    (line,) = await eventually(logged)
    assert " model=busy " in line, line
