"""Aider's weak model writes its commit messages and its chat-history summaries, each from instructions in a
system message (aider/repo.py ``get_commit_message``, aider/history.py ``summarize_all``): launch must point it
at a name that keeps the system message, not the chat-only ``<id>-fast`` (which strips every system message)."""

from __future__ import annotations

import httpx

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry
from tinytitan.launch.settings import Served, invocation

COMMIT_SYSTEM = ("You are an expert software engineer that generates concise, one-line Git commit messages based "
                 "on the provided diffs.")


async def test_aiders_weak_model_reads_its_commit_instructions(serve, demo_tok, tmp_path):
    backend = Recording([ScriptEntry("fix: x")], demo_tok)
    server = await serve(backend=backend)
    card = {"id": "tinytitan-scripted", "context_window": 32768}
    inv = invocation("aider", Served(server.base, "tinytitan-scripted", "k", card), tmp_path, [])
    weak = inv.argv[inv.argv.index("--weak-model") + 1].removeprefix("openai/")
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/chat/completions"), json={"model": weak, "messages": [
            {"role": "system", "content": COMMIT_SYSTEM},
            {"role": "user", "content": "# Diffs:\n-x = 1\n+x = 2\n"}]})
    assert r.status_code == 200
    assert COMMIT_SYSTEM in backend.prompts[0], backend.prompts[0]
