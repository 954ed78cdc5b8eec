"""Chat ``verbosity`` and Responses ``text.verbosity`` close the system prompt the model reads: for a conversation
that sends no system message of its own, that is the model's default one (a Modelfile's ``SYSTEM``), which every
protocol renders first. The note is added to it, never put in its place."""

from __future__ import annotations

import json

import httpx
import pytest

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry
from tinytitan.protocols.common import VERBOSITY

MODEL = "tinytitan-scripted"
DEFAULT = "You are the library model's assistant. Answer in French."


async def prompt_of(s, path: str, body: dict) -> str:
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), content=json.dumps({"model": MODEL, **body}),
                         headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    return s.engine.backend.prompts[-1]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"verbosity": "low", "messages": [{"role": "user", "content": "q"}]}),
    ("/v1/responses", {"text": {"verbosity": "high"}, "input": "q"}),
])
async def test_verbosity_closes_the_default_system_prompt(serve, demo_tok, path, body):
    backend = Recording([ScriptEntry("ok")], demo_tok, model_id=MODEL)
    backend.default_system = DEFAULT
    s = await serve(backend=backend)
    plain = await prompt_of(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}]})
    assert DEFAULT in plain
    prompt = await prompt_of(s, path, body)
    note = VERBOSITY[body.get("verbosity") or body.get("text", {}).get("verbosity")]
    assert DEFAULT in prompt and note in prompt, prompt
    assert prompt == plain.replace(DEFAULT, f"{DEFAULT}\n\n{note}")
