"""The small model each agent is pointed at gets the instructions and tools its requests carry.

Agents send their side tasks to a second, "small" model, each task written as a system message's instructions:
aider's weak model its commit messages and chat-history summaries (aider/repo.py ``get_commit_message``,
aider/history.py ``summarize_all``); opencode's small model its session titles; Claude Code's Haiku slot its titles
and its Explore and Guide subagents, which also carry tools. The chat-only ``<id>-fast`` name strips every system
message and every tool, so launch points each of them at the served model itself."""

from __future__ import annotations

import json

import httpx

from anthropic_util import HEADERS
from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry
from tinytitan.launch.settings import Served, invocation

MODEL = "tinytitan-scripted"
CARD = {"id": MODEL, "context_window": 32768}
COMMIT_SYSTEM = ("You are an expert software engineer that generates concise, one-line Git commit messages based "
                 "on the provided diffs.")
TITLE_SYSTEM = "You are a title generator. You output ONLY a thread title. Nothing else."
EXPLORE_SYSTEM = "You are a file search specialist. You excel at thoroughly navigating and exploring codebases."
GLOB = {"name": "Glob", "description": "Fast file pattern matching tool that works with any codebase size.",
        "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}


async def started(serve, demo_tok):
    backend = Recording([ScriptEntry("fix: x")], demo_tok)
    return backend, await serve(backend=backend)


async def test_aiders_weak_model_reads_its_commit_instructions(serve, demo_tok, tmp_path):
    backend, server = await started(serve, demo_tok)
    inv = invocation("aider", Served(server.base, MODEL, "k", CARD), tmp_path, [])
    weak = inv.argv[inv.argv.index("--weak-model") + 1].removeprefix("openai/")
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/chat/completions"), json={"model": weak, "messages": [
            {"role": "system", "content": COMMIT_SYSTEM},
            {"role": "user", "content": "# Diffs:\n-x = 1\n+x = 2\n"}]})
    assert r.status_code == 200
    assert COMMIT_SYSTEM in backend.prompts[0], backend.prompts[0]


async def test_opencodes_small_model_reads_its_title_instructions(serve, demo_tok, tmp_path):
    backend, server = await started(serve, demo_tok)
    inv = invocation("opencode", Served(server.base, MODEL, "k", CARD), tmp_path, [])
    small = json.loads(inv.env["OPENCODE_CONFIG_CONTENT"])["small_model"].split("/", 1)[1]
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/chat/completions"), json={"model": small, "messages": [
            {"role": "system", "content": TITLE_SYSTEM}, {"role": "user", "content": "rename parse to parse_text"}]})
    assert r.status_code == 200
    assert TITLE_SYSTEM in backend.prompts[0], backend.prompts[0]


async def test_claude_codes_haiku_subagent_keeps_its_prompt_and_tools(serve, demo_tok, tmp_path):
    backend, server = await started(serve, demo_tok)
    inv = invocation("claude", Served(server.base, MODEL, "k", CARD), tmp_path, [])
    haiku = inv.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"]
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/messages"), headers=HEADERS, json={
            "model": haiku, "max_tokens": 64, "system": EXPLORE_SYSTEM, "tools": [GLOB],
            "messages": [{"role": "user", "content": "Where is the parser defined?"}]})
    assert r.status_code == 200, r.text
    assert EXPLORE_SYSTEM in backend.prompts[0] and "Fast file pattern matching" in backend.prompts[0], \
        backend.prompts[0]
