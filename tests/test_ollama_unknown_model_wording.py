"""An unknown model on Ollama's routes, in Ollama's words (clients match them)."""

from __future__ import annotations

import httpx
import pytest

MODEL = "tinytitan-scripted"


@pytest.mark.parametrize("path,body", [
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "stream": False}),
    ("/api/generate", {"prompt": "x", "stream": False}),
    ("/api/show", {}),
])
async def test_an_unknown_model_is_said_in_ollamas_words(serve, path, body):
    """Ollama answers ``model "x" not found, try pulling it first`` (server/routes.go handleScheduleError); clients
    match it: Continue tests ``text.includes("try pulling it first")`` and reads the name as the error's second
    word, others look for "not found" to offer ``ollama pull``."""
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url(path), json={"model": "llama3.2:1b", **body})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error.startswith('model "llama3.2:1b" not found, try pulling it first'), error
    assert error.split(" ")[1][1:-1] == "llama3.2:1b"  # Continue's reading of the name
    assert MODEL in error  # what is served is still said


async def test_the_openai_wording_of_an_unknown_model_is_unchanged(serve):
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/v1/chat/completions"), json={"model": "nope",
                                                              "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and r.json()["error"]["message"].startswith("The model 'nope' does not exist")
