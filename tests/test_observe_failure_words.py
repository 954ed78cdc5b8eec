"""A generation that fails mid-way is logged with the error as its client saw it, in its protocol's words, whether
the answer was streamed or folded: a Messages client sees ``api_error`` (and the log says so), an OpenAI one
``server_error``. An operator grepping the log for one finds both kinds of request."""

from __future__ import annotations

import logging

import httpx
import pytest

from observe_helpers import MODEL, eventually

SCRIPT = {"output": "One two three.", "error": "boom"}
ROUTES = [("/v1/messages", {"anthropic-version": "2023-06-01"}, "api_error"),
          ("/v1/chat/completions", {}, "server_error")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path,headers,shown", ROUTES)
async def test_a_failed_generation_is_logged_in_its_protocols_words(serve, caplog, path, headers, shown, stream):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve([SCRIPT])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), headers=headers, json={
            "model": MODEL, "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
    assert "boom" in r.text and f'"{shown}"' in r.text, r.text

    async def logged():
        return [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.requests"
                and rec.getMessage().startswith(f"POST {path} ")]

    (line,) = await eventually(logged)
    assert f" error={shown} " in line and "stop=error" in line, line
