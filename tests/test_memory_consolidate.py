"""Consolidation: a workspace whose conversation went quiet has its lasting facts written to memory by a
tool-free request to the model, run only while the server is idle."""

from __future__ import annotations

import httpx
import trio

from responses_helpers import record_prompts
from memory_helpers import (
    ANSWER, FACT, FACTS, MODEL, SYSTEM, config, converse, memory_server, the_repo, wait_for_passes)
from tinytitan.chat_request import Message, ToolCall
from tinytitan.memory.consolidate import read_facts, render


async def test_a_quiet_conversation_is_consolidated_once(tmp_path, demo_tok):
    cfg = config(tmp_path, consolidate=0.2)
    j = the_repo(cfg)
    j.set("build/command", "make", importance=5)
    created = j.get("build/command").created
    async with memory_server(demo_tok, [ANSWER, FACTS], cfg) as s:
        prompts = record_prompts(s)
        out = await converse(s, "chat", stream=False)
        await wait_for_passes(s, 1)
        await trio.sleep(0.5)
        assert s.engine.consolidator.passes == 1  # once, until the workspace is active again
        j = the_repo(cfg)
        rec = j.get("build/command")
        # a fact that updates a key reuses it: creation time and importance kept
        assert (rec.value, rec.created, rec.importance, rec.tags) == (FACT, created, 5, ("consolidated",))
        assert j.get("decisions/parser").value == "keep the hand-written parser"
        assert [r.key for r in j.list()] == ["build/command", "decisions/parser"]
        assert s.engine.memory.db.run(lambda tx: tx.rows("SELECT scope FROM memory_transcripts")) == []  # taken
    assert out["text"] == ANSWER and len(prompts) == 2
    asked = prompts[1]
    assert not asked.req.tools and asked.req.tool_choice == "none" and not asked.req.memory
    assert "Existing memory keys:\n- build/command: make" in asked.prompt_text
    assert "[user] How do I build this?" in asked.prompt_text and f"[assistant] {ANSWER}" in asked.prompt_text
    assert "Working directory" not in asked.prompt_text  # system prompts are left out


async def test_a_client_request_puts_the_pass_off(tmp_path, demo_tok):
    cfg = config(tmp_path, consolidate=0.2)
    script = [ANSWER, {"output": "build/command: from the pass that was cut short", "delay_ms": 100},
              "Second answer.", FACTS]
    async with memory_server(demo_tok, script, cfg) as s:
        await converse(s, "chat", stream=False)
        with trio.fail_after(20):
            while s.engine.inner.running == 0:  # the pass is decoding
                await trio.sleep(0.01)
        second = await converse(s, "messages", stream=False)
        await wait_for_passes(s, 1)
        j = the_repo(cfg)
        assert j.get("build/command").value == FACT  # only the second pass wrote
    assert second["text"] == "Second answer."


def test_reading_the_answer_and_rendering_the_transcript():
    assert read_facts("NONE") == []
    assert read_facts("* a/b: one\n  `c`: two: three\nnot a fact line\n") == [("a/b", "one"), ("c", "two: three")]
    text = render((Message("system", "long scaffolding"), Message("user", "hi"),
                   Message("assistant", "", tool_calls=(ToolCall("1", "grep", '{"q": "x"}'),)),
                   Message("tool", "found", tool_call_id="1", name="grep")), limit=1000)
    assert text == '[user] hi\n[assistant calls grep] {"q": "x"}\n[tool result grep] found'
    assert render((Message("user", "x" * 50),), limit=10) == "…" + "x" * 10


async def test_an_answer_that_failed_is_not_kept_for_consolidation(tmp_path, demo_tok):
    """A conversation whose answer failed half-way (the model failed, the server stopped) is no conversation to
    learn from: its cut answer would be consolidated as if it were the answer given (on the next start too, from
    its stored transcript). Only an answer that finished is kept."""
    cfg = config(tmp_path, consolidate=60)
    async with memory_server(demo_tok, [{"output": "Build with make", "error": "the model failed"}, ANSWER], cfg) as s:
        body = {"model": MODEL, "stream": True, "messages": [{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": "How do I build this?"}]}
        async with httpx.AsyncClient(timeout=30) as h:
            failed = (await h.post(s.url("/v1/chat/completions"), json=body)).text
        assert "the model failed" in failed
        with trio.fail_after(10):  # the request has ended (its record is kept once its scope is left)
            while not s.server.observer.recent():
                await trio.sleep(0.02)
        assert not s.engine.consolidator.active  # no workspace waits to be consolidated …
        assert s.engine.memory.db.run(lambda tx: tx.rows("SELECT scope FROM memory_transcripts")) == []  # … nor
        await converse(s, "chat", stream=False)  # (an answer that finishes is kept)
        assert len(s.engine.consolidator.active) == 1


async def test_a_pass_the_server_stops_leaves_the_transcript_waiting(tmp_path, demo_tok):
    """The server stops mid-pass: its generation ends in-band (the engine's wind_down), and the transcript it
    took waits again for the next start, as when the pass is cancelled, rather than being lost unconsolidated."""
    cfg = config(tmp_path, consolidate=0.2)
    script = [ANSWER, {"output": "build/command: from the pass the server stopped", "delay_ms": 100}]
    async with memory_server(demo_tok, script, cfg) as s:
        await converse(s, "chat", stream=False)
        with trio.fail_after(20):
            while s.engine.inner.running == 0:  # the pass is decoding
                await trio.sleep(0.01)
        await s.engine.wind_down(0)
        with trio.fail_after(20):  # the pass has ended; its task writes the transcript it took back after that
            while not (rows := s.engine.memory.db.run(lambda tx: tx.rows("SELECT transcript FROM memory_transcripts"))):
                await trio.sleep(0.02)
        assert len(rows) == 1 and ANSWER in rows[0][0], rows
        assert s.engine.consolidator.passes == 0 and the_repo(cfg).get("build/command") is None
