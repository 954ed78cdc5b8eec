"""Memory's bounds: workspaces with memory are capped (a new one's write refused, saying so; a workspace only
named creates nothing), consolidation transcripts are bounded in rows, a forced call is the client's (no memory
tool can stand in for it), and a write that fails part way (a real short write) changes nothing, leaves the
database whole and is told to the model as not saved."""

from __future__ import annotations

import os
import resource
import signal

import anthropic
import openai
import pytest

from responses_helpers import record_prompts
from memory_helpers import FACT, SET_CALL, SYSTEM, WEATHER, config, converse, memory_server, on_disk
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.memory.consolidate import MAX_ACTIVE, TRANSCRIPT_CHARS, Consolidator
from tinytitan.memory.records import WriteFailed
from tinytitan.memory.scope import derive
from tinytitan.memory.service import Memory, MemoryConfig, scope_key
from tinytitan.memory.workspace import Workspace
from tinytitan.store.db import SqliteDatabase

HOME = "/home/tester"


def at(path: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", "hi"),), workspace=path)


def scope_of(path: str):
    return derive(at(path), "/src/launch", user="tester", home=HOME)


def workspaces(memory) -> list[str]:
    return [r[0] for r in memory.db.run(lambda tx: tx.rows("SELECT path FROM memory_workspaces ORDER BY path"))]


async def test_workspaces_with_memory_are_capped_and_a_name_alone_creates_nothing(tmp_path, demo_tok):
    cfg = config(tmp_path, max_workspaces=1)
    script = [SET_CALL, "Saved.", SET_CALL, "Not saved there.", "Just an answer."]
    async with memory_server(demo_tok, script, cfg) as s:
        memory = s.engine.memory
        for i in range(50):  # clients naming workspaces at will: no rows, no files
            memory.session(at(f"/src/junk-{i}"))
        assert workspaces(memory) == []
        await converse(s, "chat", stream=False)  # the-repo: the first workspace with memory
        prompts = record_prompts(s)
        await converse(s, "chat", stream=False, headers={"X-TinyTitan-Workspace": "/src/elsewhere"})
        answered = prompts[1].prompt_text.split("memory_set")[-1]
        assert "not saved" in answered and "at most 1 workspaces" in answered
        assert workspaces(memory) == ["/src/the-repo"]
        await converse(s, "chat", stream=False)  # the workspace that has memory still reads it
        assert FACT in prompts[2].prompt_text
    assert sorted(p.name for p in (tmp_path / "memory").iterdir()) == ["state.db"]


async def test_the_consolidation_transcripts_are_bounded_in_rows(tmp_path):
    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/launch", user="tester", home=HOME,
                                 consolidate=0))
    cons = Consolidator(engine=None, memory=memory)
    huge = ChatRequest(model="m", messages=tuple(Message("user" if i % 2 else "assistant", "word " * 20_000)
                                                 for i in range(50)) + (Message("user", "the newest question"),))
    session = memory.session(huge.with_(workspace="/src/big"))
    await cons.seen(session, huge, "the answer")
    (text,) = memory.db.run(lambda tx: tx.row("SELECT transcript FROM memory_transcripts WHERE scope = ?",
                                              (scope_key(session.scope),)))
    assert len(text) <= TRANSCRIPT_CHARS + 1 and text.endswith("[user] the newest question\n[assistant] the answer")
    for i in range(MAX_ACTIVE + 5):  # many workspaces: the ones active longest ago are dropped
        await cons.seen(memory.session(at(f"/src/ws{i}")), at(f"/src/ws{i}"), "")
    rows = memory.db.run(lambda tx: tx.rows("SELECT scope FROM memory_transcripts"))
    assert len(rows) == MAX_ACTIVE == len(cons.active) and (scope_key(session.scope),) not in rows
    assert session.scope.parts not in cons.active
    # a new server on the same database picks up what waits for its user
    again = Consolidator(engine=None, memory=memory)
    await again.load()
    assert set(again.active) == set(cons.active)
    memory.close()


WEATHER_CALL_OPENING = '{"name": "get_weather"'


@pytest.mark.parametrize("choice", ["required", "named", "any"])
async def test_a_forced_call_is_answered_by_a_client_tool_only(choice, tmp_path, serve, demo_backend):
    """The demo model under the forced-call grammar: with memory tools offered it could satisfy ``required``
    with a memory call the layer would answer itself; they are not offered, so the call the client gets is
    its own."""
    memory = Memory(config(tmp_path))
    s = await serve(backend=demo_backend, memory=memory, model_id=demo_backend.model_id)
    prompts = record_prompts(s)
    try:
        if choice == "any":
            async with anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0) as c:
                m = await c.messages.create(
                    model=demo_backend.model_id, max_tokens=64, system=SYSTEM, tool_choice={"type": "any"},
                    messages=[{"role": "user", "content": "Weather in Paris?"}],
                    tools=[{"name": WEATHER["name"], "description": WEATHER["description"],
                            "input_schema": WEATHER["parameters"]}])
            calls = [b.name for b in m.content if b.type == "tool_use"]
        else:
            async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
                r = await c.chat.completions.create(
                    model=demo_backend.model_id, max_tokens=64, tools=[{"type": "function", "function": WEATHER}],
                    tool_choice="required" if choice == "required" else
                    {"type": "function", "function": {"name": "get_weather"}},
                    messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Weather?"}])
            calls = [t.function.name for t in r.choices[0].message.tool_calls or ()]
    finally:
        memory.close()
    assert len(prompts) == 1  # no memory round ran
    assert [t.name for t in prompts[0].req.tools] == ["get_weather"]
    assert "There are no memory tools" in prompts[0].prompt_text and "memory_set" not in prompts[0].prompt_text
    assert calls and set(calls) == {"get_weather"}  # (parallel calls are allowed: each is the client's)


def short_writes(db_file, margin: int = 10):
    """From now on a write past the database's (or its WAL's) current size is cut short by the kernel."""
    sizes = [os.path.getsize(p) for p in (db_file, str(db_file) + "-wal") if os.path.exists(p)]
    resource.setrlimit(resource.RLIMIT_FSIZE, (max(sizes) + margin, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


class limits:
    def __enter__(self):
        self.handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        self.fsize = resource.getrlimit(resource.RLIMIT_FSIZE)

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_FSIZE, self.fsize)
        signal.signal(signal.SIGXFSZ, self.handler)


def test_a_write_that_fails_part_way_changes_nothing(tmp_path):
    """A real short write: the file-size limit lets the first bytes through, then refuses."""
    path = tmp_path / "state.db"
    j = Workspace(SqliteDatabase(path), "ns/user/ws", "/src/project")
    j.set("first", "one")
    with limits():
        short_writes(path)
        with pytest.raises(WriteFailed):
            for i in range(50):  # (until the WAL must grow)
                j.set(f"second{i}", "x" * 20_000)
    j.set("third", "three")  # the database goes on
    again = Workspace(SqliteDatabase(path), "ns/user/ws")
    keys = [r.key for r in again.list()]
    assert "first" in keys and "third" in keys and "second49" not in keys
    assert again.db.run(lambda tx: tx.row("PRAGMA integrity_check")[0]) == "ok"


async def test_a_failed_write_is_told_to_the_model(tmp_path, demo_tok):
    cfg = config(tmp_path)
    big = SET_CALL.replace(FACT, FACT + " " + "x" * 60_000)
    async with memory_server(demo_tok, [big, "I could not save it."], cfg) as s:
        prompts = record_prompts(s)
        with limits():
            short_writes(s.engine.memory.db.path)
            out = await converse(s, "chat", stream=False)
    assert out["text"] == "I could not save it."
    answered = prompts[1].prompt_text.split("memory_set")[-1]
    assert "not saved" in answered and '"saved"' not in answered
    assert on_disk(cfg.directory).get("build/command") is None
