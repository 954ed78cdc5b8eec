"""POST /v1/memories/trace_summarize, the route Codex's memories feature calls on its provider (codex-api
MemoriesClient): each trace's items summarised by the compaction summariser, in order, checked like input."""

from __future__ import annotations

import httpx

import strict

MODEL = "tinytitan-scripted"
TRACE = {"id": "trace-1", "metadata": {"source_path": "/tmp/rollout.jsonl"},
         "items": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
                   {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c1", "output": "tests pass"}]}


async def test_each_trace_gets_a_trace_summary_and_a_memory_summary(serve, demo_tok):
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry("The user had a bug fixed; the tests pass."), ScriptEntry("Bug fixed."),
                         ScriptEntry("A second session."), ScriptEntry("Second.")], demo_tok)
    server = await serve(backend=backend)
    second = {**TRACE, "id": "trace-2", "items": TRACE["items"][:1]}
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/memories/trace_summarize"),
                              json={"model": MODEL, "traces": [TRACE, second], "reasoning": {"effort": "low"}})
    assert r.status_code == 200, r.text
    assert r.json() == {"output": [
        {"trace_summary": "The user had a bug fixed; the tests pass.", "memory_summary": "Bug fixed."},
        {"trace_summary": "A second session.", "memory_summary": "Second."}]}
    assert "fix the bug" in backend.prompts[0] and "tests pass" in backend.prompts[0]
    assert "The user had a bug fixed" in backend.prompts[1]  # the memory summary is of the trace summary


async def test_a_bad_trace_is_refused_by_its_path(serve):
    server = await serve(["x"])
    async with httpx.AsyncClient() as client:
        bad = {**TRACE, "items": [{"type": "message", "role": "user", "content": [{"type": "input_file"}]}]}
        r = await client.post(server.url("/v1/memories/trace_summarize"), json={"model": MODEL, "traces": [TRACE, bad]})
        assert r.status_code == 400
        strict.openai_error(r.json())
        assert r.json()["error"]["param"].startswith("traces[1].items"), r.json()
        r = await client.post(server.url("/v1/memories/trace_summarize"), json={"model": MODEL})
        assert r.status_code == 400 and r.json()["error"]["param"] == "traces"
        r = await client.post(server.url("/v1/memories/trace_summarize"), json={"model": "nope", "traces": []})
        assert r.status_code == 404
