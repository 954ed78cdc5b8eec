"""The request log line: one INFO line per request, with its counts and client but no prompt or answer text, and
no line a request's path can forge."""

from __future__ import annotations

import logging

import httpx

from observe_helpers import ANSWER, MODEL, client, eventually
from tinytitan.observe.clients import client_name

SECRET_PROMPT = "the launch code is swordfish"


TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("read_file", "run_tests")]


async def test_one_info_line_per_request_without_prompt_or_answer_text(serve, caplog):
    caplog.set_level(logging.DEBUG, logger="tinytitan.requests")
    s = await serve([ANSWER])
    r = await client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": SECRET_PROMPT}],
                                                tools=TOOLS)
    assert r.choices[0].message.content == ANSWER

    async def logged():
        return [rec for rec in caplog.records if rec.name == "tinytitan.requests" and rec.levelno == logging.INFO
                and "/v1/chat/completions" in rec.getMessage()]

    (line,) = await eventually(logged)
    text = line.getMessage()
    u = r.usage
    for part in ("POST /v1/chat/completions 200 openai_chat", f"model={MODEL}", f"prompt={u.prompt_tokens}",
                 f"cached={u.prompt_tokens_details.cached_tokens}", f"completion={u.completion_tokens}", "tools=2",
                 'client="openai-python"', "ua=\"AsyncOpenAI/Python", "ttft=", "duration="):
        assert part in text, (part, text)
    debug = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.DEBUG
             and rec.name == "tinytitan.requests"]
    assert any("read_file, run_tests" in m for m in debug)
    assert "read_file" not in text
    everything = "\n".join(rec.getMessage() for rec in caplog.records)
    assert SECRET_PROMPT not in everything and "capital of France" not in everything


async def test_a_path_cannot_write_a_log_line_of_its_own(serve, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve(["ok"])
    forged = "2026-01-01 00:00:00,000 INFO tinytitan.requests: GET /forged 200"
    async with httpx.AsyncClient() as c:
        r = await c.get(s.url("/v1/models/x%0A" + forged.replace(" ", "%20")))
    assert r.status_code == 404

    async def logged():
        return [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.requests" and "/v1/models/x"
                in rec.getMessage()]

    (line,) = await eventually(logged)
    assert "\n" not in line and "/v1/models/x\\n2026-01-01" in line


def test_client_names_from_user_agents():
    assert client_name("claude-cli/2.1.3 (external, cli)") == "Claude Code"
    assert client_name("codex_exec/0.72.0 (Debian 12; x86_64)") == "Codex"
    assert client_name("OpenAI/Python 1.99.0") == "openai-python"
    assert client_name("Anthropic/Python 0.60.0") == "anthropic-python"
    assert client_name("") == "unknown"
    assert client_name("SomeTool/3.2 (secret details)") == "SomeTool"
