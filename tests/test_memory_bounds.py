"""Memory's bounds: open journals are capped (the least recently used idle one closed, opened again on demand),
a workspace's consolidation transcript is bounded, a forced call is the client's (no memory tool can stand in
for it), a write that fails part way leaves the journal readable and is told to the model as not saved, and
the directory is synced after a compaction."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat

import anthropic
import openai
import pytest

from responses_helpers import record_prompts
from test_memory_layer import FACT, SET_CALL, SYSTEM, WEATHER, config, converse, memory_server
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.memory.consolidate import MAX_ACTIVE, TRANSCRIPT_CHARS, Consolidator
from tinytitan.memory.journal import COMPACT_SLACK, Journal, WriteFailed
from tinytitan.memory.scope import derive
from tinytitan.memory.service import Memory, MemoryConfig, journal_path

HOME = "/home/tester"


def at(path: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", "hi"),), workspace=path)


def scope_of(path: str):
    return derive(at(path), "/src/launch", user="tester", home=HOME)


def test_open_journals_are_capped_idle_ones_closed_first(tmp_path, caplog):
    caplog.set_level("INFO", logger="tinytitan.memory")
    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/launch", user="tester", home=HOME,
                                 max_open=2, consolidate=0))
    one = memory.session(at("/src/one"))
    one.run("memory_set", json.dumps({"key": "fact", "value": "kept in one"}))
    memory.session(at("/src/two"))  # the launch journal (used least recently) is closed
    assert [j.workspace_path for j in memory.journals.values()] == ["/src/one", "/src/two"]
    memory.session(at("/src/three"))
    assert [j.workspace_path for j in memory.journals.values()] == ["/src/two", "/src/three"]
    # closed means its lock is free: another writer could take it now
    assert one.journal.closed
    other = Journal.open(journal_path(tmp_path, one.scope))
    assert other.persistent and other.get("fact").value == "kept in one"
    other.close()
    # a closed journal refuses a write (never kept in memory only as if saved) ...
    text, ok = one.run("memory_set", json.dumps({"key": "late", "value": "x"}))
    assert not ok and "not saved" in json.loads(text)["error"]
    # ... and a new request for the workspace opens it again, replayed
    again = memory.session(at("/src/one"))
    assert again.journal is not one.journal and again.journal.get("fact").value == "kept in one"
    assert len(memory.journals) == 2
    assert any("least recently used" in r.getMessage() for r in caplog.records)
    memory.close()


def test_a_held_journal_is_never_closed_to_make_room(tmp_path, caplog):
    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/launch", user="tester", home=HOME,
                                 max_open=1, consolidate=0))
    with memory.hold(scope_of("/src/busy")) as busy:
        with memory.hold(scope_of("/src/also-busy")) as also:
            memory.session(at("/src/idle"))
            assert not busy.closed and not also.closed  # in use: over the cap rather than closed under a request
            assert any("every one is in use" in r.getMessage() for r in caplog.records)
    memory.session(at("/src/next"))
    assert busy.closed and also.closed and len(memory.journals) == 1
    memory.close()


async def test_a_workspace_closed_between_requests_is_opened_again_with_its_facts(tmp_path, demo_tok):
    cfg = config(tmp_path, max_open=1)
    async with memory_server(demo_tok, [SET_CALL, "Saved.", SET_CALL.replace("build/command", "other"), "ok"],
                             cfg) as s:
        await converse(s, "chat", stream=False)  # writes build/command in /src/the-repo
        await converse(s, "chat", stream=False, headers={"X-TinyTitan-Workspace": "/src/elsewhere"})
        memory = s.engine.memory
        assert [j.workspace_path for j in memory.journals.values()] == ["/src/elsewhere"]
        repo = scope_of("/src/the-repo")
        assert Journal.open(journal_path(cfg.directory, repo)).persistent  # released: this probe took the lock
    async with memory_server(demo_tok, ["The build command is make -j2."], cfg) as s:
        prompts = record_prompts(s)
        await converse(s, "chat", stream=False)
    assert FACT in prompts[0].prompt_text


async def test_the_consolidation_transcript_is_bounded(tmp_path):
    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/launch", user="tester", home=HOME,
                                 consolidate=0))
    cons = Consolidator(engine=None, memory=memory)
    huge = ChatRequest(model="m", messages=tuple(Message("user" if i % 2 else "assistant", "word " * 20_000)
                                                 for i in range(50)) + (Message("user", "the newest question"),))
    session = memory.session(huge.with_(workspace="/src/big"))
    cons.seen(session, huge, "the answer")
    act = cons.active[session.scope.parts]
    assert isinstance(act.transcript, str) and len(act.transcript) <= TRANSCRIPT_CHARS + 1
    assert act.transcript.endswith("[user] the newest question\n[assistant] the answer")
    for i in range(MAX_ACTIVE + 5):  # many workspaces: the ones active longest ago are dropped
        cons.seen(memory.session(at(f"/src/ws{i}")), at(f"/src/ws{i}"), "")
    assert len(cons.active) == MAX_ACTIVE and session.scope.parts not in cons.active
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


def test_a_write_that_fails_part_way_leaves_the_journal_readable(tmp_path):
    """A real short write: the file-size limit lets the first bytes of a record through, then refuses."""
    path = tmp_path / "ws" / "journal.ndjson"
    j = Journal.open(path, "/src/project")
    j.set("first", "one")
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 10, hard))
        with pytest.raises(WriteFailed):
            j.set("second", "x" * 200)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert j.get("second") is None
    j.set("third", "three")  # the next record starts on a clean line
    j.close()
    replayed = Journal.read(path)
    assert sorted(replayed.records) == ["first", "third"] and replayed.lines == 3
    assert all(json.loads(line) for line in path.read_text().splitlines())


async def test_a_failed_write_is_told_to_the_model(tmp_path, demo_tok):
    cfg = config(tmp_path)
    async with memory_server(demo_tok, [SET_CALL, "I could not save it."], cfg) as s:
        journal = s.engine.memory.journal(scope_of("/src/the-repo"))
        prompts = record_prompts(s)
        old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (journal.path.stat().st_size + 10, hard))
            out = await converse(s, "chat", stream=False)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, old_handler)
        assert journal.get("build/command") is None
    assert out["text"] == "I could not save it."
    answered = prompts[1].prompt_text.split("memory_set")[-1]
    assert "not saved" in answered and '"saved"' not in answered
    assert Journal.read(journal.path).records == {} and journal.path.read_text().endswith("\n")


def test_the_directory_is_synced_after_a_compaction(tmp_path, monkeypatch):
    path = tmp_path / "ws" / "journal.ndjson"
    j = Journal.open(path, "/src/project")
    for i in range(COMPACT_SLACK + 10):
        j.set("churn", f"version {i}")
    j.close()
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(a, b):
        events.append(("replace", None))
        return real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    j = Journal.open(path, "/src/project")
    assert len(path.read_text().splitlines()) == 2  # compacted
    kinds = [k for k, _ in events]
    assert kinds.index("replace") < kinds.index("fsync-dir")
    assert ("fsync-dir", os.stat(path.parent).st_ino) in events
    j.close()
