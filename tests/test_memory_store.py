"""The memory store: a workspace's records in the state database (set, append, delete, ranked full-text
search), what survives a restart, a failed write, the workspace cap, older journals migrated, keys, scopes,
the bootstrap bound and the tool executor — everything below the request path."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat

import pytest

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.memory import fragment, tools
from tinytitan.memory.keys import Refused, parse_key, parse_prefix
from tinytitan.memory.migrate import JOURNAL
from tinytitan.memory.records import MAX_VALUE_BYTES, WriteFailed
from tinytitan.memory.scope import HeaderRefused, declared_in_system, derive, workspace_id
from tinytitan.memory.service import Memory, MemoryConfig, scope_key
from tinytitan.memory.workspace import Workspace, WorkspacesFull
from tinytitan.store import db as dbm
from memory_helpers import req


@pytest.fixture
def path(tmp_path):
    """The state database's file."""
    return tmp_path / "state" / "state.db"


def opened(path, scope: str = "ns/user/ws", **kw) -> Workspace:
    return Workspace(dbm.SqliteDatabase(path), scope, "/src/project", **kw)


def records(j: Workspace) -> dict:
    return {r.key: r.full() for r in j.list()}


# -- the contract --------------------------------------------------------------------------------------------
def test_set_get_list_search_append_delete(path):
    j = opened(path)
    j.set("build/command", "make -j2\nthe Makefile's default target is slow", importance=4, tags=["build"])
    j.set("decisions/parser", "kept the hand-written parser: Lark cannot stream partial values", importance=5)
    j.set("notes/misc", "the build bot is named builder; nothing else", importance=1)
    assert j.get("build/command").summary == "make -j2"
    assert [r.key for r in j.list("build/")] == ["build/command"]
    assert [r.key for r in j.list()] == ["build/command", "decisions/parser", "notes/misc"]
    # a key match outranks body matches, whatever the importance
    assert [r.key for r in j.search("build")] == ["build/command", "notes/misc"]
    assert [r.key for r in j.search("", tags=("build",))] == ["build/command"]
    assert [r.key for r in j.search("", min_importance=5)] == ["decisions/parser"]
    assert [r.key for r in j.search("parse lark")] == ["decisions/parser"]  # each word a prefix
    assert [r.key for r in j.search("build", prefix="notes/")] == ["notes/misc"]
    assert j.search("nowhere") == []
    created = j.get("build/command").created
    j.set("build/command", "make -j4")  # a rewrite keeps the creation time and the metadata
    rec = j.get("build/command")
    assert (rec.value, rec.created, rec.importance, rec.tags) == ("make -j4", created, 4, ("build",))
    assert rec.updated >= created
    assert [r.key for r in j.search("j2")] == []  # the index follows the rewrite
    j.append("notes/misc", "second line")
    assert j.get("notes/misc").value.endswith("nothing else\nsecond line")
    assert [r.key for r in j.search("second")] == ["notes/misc"]
    j.append("notes/new", "first")
    assert j.get("notes/new").value == "first"
    assert j.delete("notes/misc") and not j.delete("notes/misc")
    assert j.get("notes/misc") is None and [r.key for r in j.search("builder")] == []


def test_search_ranks_by_relevance_then_importance(path):
    j = opened(path)
    j.set("a/one", "cache cache cache eviction", importance=1)
    j.set("a/two", "the cache", importance=5)
    j.set("cache/layout", "where prompts live", importance=1)
    j.set("a/three", "nothing to see", importance=5, tags=["cache"])
    assert [r.key for r in j.search("cache")][0] == "cache/layout"  # the key first, then a tag
    assert [r.key for r in j.search("cache")][1] == "a/three"
    hits = [r.key for r in j.search("cache eviction")]
    assert hits.index("a/one") < hits.index("a/two")  # in the values: more and both words beat importance
    other = Workspace(j.db, "ns/user/other")
    assert other.search("cache") == [] and other.list() == []  # a workspace sees only its own


def test_state_survives_a_restart(path):
    j = opened(path)
    j.set("a/b", "one", importance=2, confidence=0.5, tags=["x"])
    j.append("a/b", "two")
    j.set("c", "three")
    j.delete("c")
    before = records(j)
    j.db.close()
    again = opened(path)
    assert records(again) == before
    assert again.db.run(lambda tx: tx.row("SELECT path FROM memory_workspaces WHERE scope = 'ns/user/ws'"),
                        write=False) == ("/src/project",)


def test_two_writers_share_a_workspace(path):
    first, second = opened(path), opened(path)  # two servers on one database
    first.set("shared", "from the first")
    assert second.persistent and second.get("shared").value == "from the first"
    second.append("shared", "and the second")
    assert first.get("shared").value == "from the first\nand the second"


def test_files_are_the_owners_only(tmp_path):
    memory = Memory(MemoryConfig(directory=tmp_path / "mem", launch_dir="/src/project", user="me", home="/home/me"))
    memory.session(ChatRequest(model="m", messages=(Message("user", "hi"),))).run(
        "memory_set", json.dumps({"key": "k", "value": "v"}))
    db = tmp_path / "mem" / dbm.FILE_NAME
    for f in (db, tmp_path / "mem" / (dbm.FILE_NAME + "-wal")):  # SQLite gives its WAL the file's mode
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f
    assert stat.S_IMODE(os.stat(tmp_path / "mem").st_mode) == 0o700
    memory.close()


def test_a_failed_write_changes_nothing_and_says_so(path, monkeypatch, caplog):
    j = opened(path)
    j.set("k", "before")
    real = dbm.SqliteDatabase.run

    def full(self, fn, *args, write=True):
        if write:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, fn, *args, write=write)

    monkeypatch.setattr(dbm.SqliteDatabase, "run", full)
    with pytest.raises(WriteFailed, match="disk is full"):
        j.set("k", "after")
    assert j.get("k").value == "before"
    text, ok = tools.execute(j, "memory_set", json.dumps({"key": "k", "value": "after"}))
    assert not ok and "not saved" in json.loads(text)["error"]
    assert j.get("k").value == "before"
    assert "could not be written" in caplog.text


def test_a_database_that_cannot_be_opened_keeps_memory_in_ram(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    memory = Memory(MemoryConfig(directory=tmp_path, state=str(blocker / "under"), launch_dir="/src/p", user="me",
                                 home="/home/me"))
    session = memory.session(ChatRequest(model="m", messages=(Message("user", "hi"),)))
    assert not session.workspace.persistent and "cannot be opened" in session.workspace.why_not
    text, ok = session.run("memory_set", json.dumps({"key": "k", "value": "v"}))
    assert ok and "kept for this session only" in json.loads(text)["note"]
    assert session.workspace.get("k").value == "v"
    assert "will not outlive it" in fragment.bootstrap(session.workspace, "proj", ("memory_get",))


def test_workspaces_are_capped_and_reading_creates_none(path, caplog):
    db = dbm.SqliteDatabase(path)
    for i in range(3):
        ws = Workspace(db, f"ns/user/ws{i}", f"/src/ws{i}", max_workspaces=2)
        assert ws.search("x") == [] and ws.get("k") is None and ws.list() == []
    assert db.run(lambda tx: tx.row("SELECT count(*) FROM memory_workspaces")[0]) == 0
    Workspace(db, "ns/user/ws0", "/src/ws0", max_workspaces=2).set("k", "v")
    Workspace(db, "ns/user/ws1", "/src/ws1", max_workspaces=2).set("k", "v")
    third = Workspace(db, "ns/user/ws2", "/src/ws2", max_workspaces=2)
    with pytest.raises(WorkspacesFull):
        third.set("k", "v")
    text, ok = tools.execute(third, "memory_set", '{"key": "k", "value": "v"}')
    error = json.loads(text)["error"]
    assert not ok and "not saved" in error and "at most 2 workspaces" in error and "--memory-max-workspaces" in error
    Workspace(db, "ns/user/ws0", "/src/ws0", max_workspaces=2).set("k2", "v")  # the ones with memory keep it
    assert "refused for a new workspace" in caplog.text


def test_older_journals_are_migrated_verified_and_kept(tmp_path, caplog):
    old = tmp_path / "memory" / "tinytitan" / "me" / workspace_id("/src/proj")
    old.mkdir(parents=True)
    lines = [{"op": "workspace", "path": "/src/proj", "at": 1.0},
             {"op": "set", "key": "build/command", "value": "make", "importance": 5, "tags": ["b"], "at": 10.0},
             {"op": "append", "key": "build/command", "text": "then test", "at": 20.0},
             {"op": "set", "key": "gone", "value": "x", "at": 21.0}, {"op": "delete", "key": "gone", "at": 22.0},
             {"op": "set", "key": "build/command", "value": "make -j2", "importance": 5, "tags": ["b"], "at": 30.0}]
    body = "".join(json.dumps(x) + "\n" for x in lines) + '{"op":"set","key":"torn","val'
    (old / JOURNAL).write_text(body)
    caplog.set_level(logging.INFO, "tinytitan.memory")
    cfg = MemoryConfig(directory=tmp_path / "memory", state=str(tmp_path / "state"), launch_dir="/src/proj",
                       user="me", home="/home/me")
    memory = Memory(cfg)
    assert "1 keys of /src/proj migrated" in caplog.text and "torn last record" in caplog.text
    session = memory.session(ChatRequest(model="m", messages=(Message("user", "hi"),)))
    rec = session.workspace.get("build/command")
    assert (rec.value, rec.importance, rec.tags, rec.created, rec.updated) == ("make -j2", 5, ("b",), 10.0, 30.0)
    assert [r.key for r in session.workspace.list()] == ["build/command"]
    assert [r.key for r in session.workspace.search("make")] == ["build/command"]
    assert not (old / JOURNAL).exists() and (old / (JOURNAL + ".migrated")).read_text() == body
    memory.close()
    caplog.clear()
    Memory(cfg).close()
    assert "keys of /src/proj migrated" not in caplog.text  # once


# -- keys --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, why", [
    ("../etc/passwd", "starts with '.'"), ("a/../b", "starts with '.'"), ("/abs", "starts with '/'"),
    ("a\\b", "'\\'"), ("a/*", "glob"), ("a?", "glob"), ("a\nb", "control"), ("a//b", "empty segment"),
    ("a/", "empty segment"), ("", "empty"), ("x" * 201, "characters long"), ("a b", "contains ' '"),
    ("/".join("a" * 9), "segments"),
])
def test_keys_are_parsed_not_trusted(key, why):
    with pytest.raises(Refused, match=None) as info:
        parse_key(key)
    assert why in str(info.value)


def test_prefixes():
    assert parse_prefix("") == "" and parse_prefix("build/") == "build/" and parse_prefix("build") == "build"
    with pytest.raises(Refused):
        parse_prefix("../")


def test_values_are_bounded(path):
    j = opened(path)
    with pytest.raises(Refused, match="bytes"):
        j.set("big", "x" * (MAX_VALUE_BYTES + 1))
    j.set("big", "x" * MAX_VALUE_BYTES)
    with pytest.raises(Refused, match="bytes"):
        j.append("big", "y")


# -- the executor --------------------------------------------------------------------------------------------
def test_tool_errors_name_what_is_wrong(path):
    j = opened(path)
    cases = {
        ("memory_get", '{"key": "../x"}'): "starts with '.'",
        ("memory_get", "not json"): "not valid JSON",
        ("memory_get", "[1]"): "JSON object",
        ("memory_get", "{}"): "missing argument(s): key",
        ("memory_set", '{"key": "k", "value": "v", "workspace": "/other"}'): "unknown argument(s): workspace",
        ("memory_set", '{"key": "k", "value": "v", "importance": 9}'): "importance",
        ("memory_set", '{"key": "k", "value": "v", "tags": ["a/b"]}'): "tag",
        ("memory_search", '{"limit": 500}'): "limit",
    }
    for (name, args), why in cases.items():
        text, ok = tools.execute(j, name, args)
        assert not ok and why in json.loads(text)["error"], (name, args, text)
    assert j.list() == []
    text, ok = tools.execute(j, "memory_set", '{"key": "k", "value": "v", "importance": 5, "tags": ["t"]}')
    assert ok and json.loads(text)["saved"] == "k"
    assert json.loads(tools.execute(j, "memory_get", '{"key": "k"}')[0])["value"] == "v"
    assert json.loads(tools.execute(j, "memory_get", '{"key": "nope"}')[0]) == {"key": "nope", "found": False}
    listed = json.loads(tools.execute(j, "memory_list", "{}")[0])
    assert listed["count"] == 1 and listed["keys"][0]["summary"] == "v"
    assert json.loads(tools.execute(j, "memory_search", '{"text": "k"}')[0])["results"][0]["key"] == "k"


def test_results_are_capped(path):
    j = opened(path)
    for i in range(150):
        j.set(f"k/{i:03}", f"value {i} " + "z" * 500)
    listed = json.loads(tools.execute(j, "memory_list", '{"prefix": "k/"}')[0])
    assert listed["count"] == 150 and len(listed["keys"]) == tools.MAX_LIST and "narrow" in listed["note"]
    assert all(len(k["summary"]) <= 200 for k in listed["keys"])
    hits = json.loads(tools.execute(j, "memory_search", '{"text": "value", "limit": 20}')[0])["results"]
    assert len(hits) == 20


def test_log_lines_carry_sizes_never_contents(path, caplog):
    secret = "hunter2-the-database-password"
    with caplog.at_level(logging.DEBUG, logger="tinytitan"):
        j = opened(path)
        tools.execute(j, "memory_set", json.dumps({"key": "creds/db-hunter2", "value": secret}))
        tools.execute(j, "memory_append", json.dumps({"key": "creds/db-hunter2", "text": secret}))
        tools.execute(j, "memory_get", json.dumps({"key": "creds/db-hunter2"}))
        tools.execute(j, "memory_delete", json.dumps({"key": "creds/db-hunter2"}))
    messages = [r.getMessage() for r in caplog.records]
    assert any("memory set" in m for m in messages)
    assert not any("hunter2" in m for m in messages)


# -- the bootstrap fragment ----------------------------------------------------------------------------------
def test_the_bootstrap_is_bounded(path):
    j = opened(path)
    for i in range(500):
        j.set(f"facts/{i:03}", f"fact number {i}: " + "w" * 400 + "\nsecond line never shown", importance=1 + i % 5)
    text = fragment.bootstrap(j, "project", tuple(tools.DEFINITIONS))
    listed = [ln for ln in text.splitlines() if ln.startswith("- facts/")]
    assert len(listed) <= fragment.MAX_RECORDS
    assert len("\n".join(listed).encode()) <= fragment.MAX_BYTES
    assert all(len(ln.split(": ", 1)[1]) <= 200 for ln in listed)
    assert "second line never shown" not in text
    assert f"({500 - len(listed)} more not shown" in text
    # most important first; among equals the older fact first
    assert listed[0].startswith("- facts/004 (importance 5)") and listed[1].startswith("- facts/009 ")
    tight = fragment.bootstrap(j, "project", (), max_records=500, max_bytes=4096)
    assert len("\n".join(ln for ln in tight.splitlines() if ln.startswith("- facts/")).encode()) <= 4096
    assert "There are no memory tools" in tight


# -- scope ---------------------------------------------------------------------------------------------------
def test_scope_sources_in_order():
    home = "/home/me"
    claude = "You are Claude Code.\n<env>\nWorking directory: /src/claude-proj\nIs directory a git repo: Yes\n</env>"
    codex = "<environment_context>\n  <cwd>/src/codex-proj</cwd>\n</environment_context>"
    assert derive(req(claude, header="/src/from-header"), "/src/launch", home=home).path == "/src/from-header"
    assert derive(req(claude), "/src/launch", home=home).path == "/src/claude-proj"
    assert derive(req(codex), "/src/launch", home=home).path == "/src/codex-proj"
    assert derive(req("nothing here"), "/src/launch", home=home).path == "/src/launch"
    # only system messages count, and only absolute paths
    user_said = ChatRequest(model="m", messages=(Message("user", "Working directory: /src/user-proj"),))
    assert derive(user_said, "/src/launch", home=home).path == "/src/launch"
    assert derive(req("Working directory: relative/dir"), "/src/launch", home=home).path == "/src/launch"
    assert declared_in_system(req("x\n  Working directory:  /a/b c  \n")) == "/a/b c"
    assert declared_in_system(req("# Environment\n - Primary working directory: /src/cc2\n - Platform: linux")) == \
        "/src/cc2"
    # Codex's context turn has the user role; other user text never counts
    codex_turn = ChatRequest(model="m", messages=(Message("user", codex), Message("user", "hi")))
    assert derive(codex_turn, "/src/launch", home=home).path == "/src/codex-proj"
    pasted = ChatRequest(model="m", messages=(Message("user", "look: " + codex),))
    assert derive(pasted, "/src/launch", home=home).path == "/src/launch"


def test_home_its_parent_and_root_are_refused(caplog):
    home = "/home/me"
    for bad in ("/home/me", "/home/me/", "/home", "/", "/home/me/proj/../"):
        # the header is the client's statement: refused, never answered with another workspace
        with pytest.raises(HeaderRefused, match="too broad"):
            derive(req(header=bad), "/src/launch", home=home)
        # a directory a system message states is only read there: the next source is tried
        assert derive(req(f"Working directory: {bad}"), "/src/launch", home=home).path == "/src/launch", bad
    assert derive(req("Working directory: /home/me"), "/home/me", home=home) is None
    assert any("refused" in r.getMessage() for r in caplog.records)


def test_workspace_ids_are_name_plus_digest_of_the_full_path():
    a, b = workspace_id("/src/one/proj"), workspace_id("/src/two/proj")
    assert a.startswith("proj-") and b.startswith("proj-") and a != b
    assert workspace_id("/x/we ird.name") .startswith("we_ird.name-")
    assert workspace_id("/x/..hidden").startswith("hidden-")


def test_a_session_is_scoped_by_the_request_not_its_arguments(tmp_path):
    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/launch", user="me", home="/home/me"))
    one = memory.session(req(header="/src/one"))
    two = memory.session(req(header="/src/two"))
    one.run("memory_set", json.dumps({"key": "fact", "value": "in one"}))
    # a call cannot name another workspace, and keys cannot climb out of their own
    assert not two.run("memory_get", json.dumps({"key": "fact", "workspace": "/src/one"}))[1]
    assert not two.run("memory_get", json.dumps({"key": "../" + one.scope.workspace + "/fact"}))[1]
    assert json.loads(two.run("memory_get", '{"key": "fact"}')[0]) == {"key": "fact", "found": False}
    scopes = memory.db.run(lambda tx: tx.rows("SELECT scope, path FROM memory_workspaces"), write=False)
    assert scopes == [(scope_key(one.scope), "/src/one")]  # the workspace only read has no rows
    assert memory.session(req().with_(memory=False)) is None and memory.session(req().with_(fast=True)) is None
    memory.close()


# -- the CLI -------------------------------------------------------------------------------------------------
def test_the_memory_cli(tmp_path, capsys):
    from tinytitan.cli import main

    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/proj", user="me", home="/home/me"))
    session = memory.session(req())
    session.run("memory_set", json.dumps({"key": "build/command", "value": "make -j2\nslow otherwise"}))
    session.run("memory_set", json.dumps({"key": "notes/other", "value": "x"}))
    ws = session.scope.workspace
    base = ["memory", "--memory-dir", str(tmp_path), "--user", "me"]

    def cli(*args) -> tuple[int, str, str]:
        code = main(base + list(args))
        out, err = capsys.readouterr()
        return code, out, err

    # while a server has it open: reads and changes both work (one database, its own locking)
    code, out, _ = cli("projects")
    assert code == 0 and ws in out and "2 records" in out and "/src/proj" in out
    assert cli("list", ws)[1].splitlines() == ["build/command\t3\tmake -j2", "notes/other\t3\tx"]
    assert cli("list", "/src/proj", "build/")[1].splitlines() == ["build/command\t3\tmake -j2"]
    assert json.loads(cli("show", ws, "build/command")[1])["value"] == "make -j2\nslow otherwise"
    code, _, err = cli("show", ws, "../x")
    assert code == 1 and "starts with '.'" in err
    assert cli("delete", ws, "notes/other") == (0, "deleted notes/other\n", "")
    assert session.workspace.get("notes/other") is None  # the server sees it at once
    assert cli("list", ws)[1].splitlines() == ["build/command\t3\tmake -j2"]
    code, _, err = cli("forget", ws)
    assert code == 1 and "--yes" in err
    assert cli("forget", ws, "--yes")[:2] == (0, "forgot 1 records\n")
    code, _, err = cli("list", ws)
    assert code == 1 and "no memory for workspace" in err
    assert "no memory for" in cli("projects")[1]
    memory.close()


def test_a_tool_that_breaks_answers_an_error(path, monkeypatch):
    j = opened(path)
    monkeypatch.setattr(Workspace, "list", lambda self, *args, **kw: 1 / 0)
    text, ok = tools.execute(j, "memory_list", "{}")
    assert not ok and "ZeroDivisionError" in json.loads(text)["error"]


def test_a_client_tool_of_the_same_name_stays_the_clients(tmp_path):
    from tinytitan.chat_request import Tool

    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/proj", user="me", home="/home/me",
                                 tools="minimal"))
    session = memory.session(req())
    theirs = Tool("memory_get", "the client's own")
    out = session.augment(req().with_(tools=(theirs,)))
    assert [t.name for t in out.tools] == ["memory_get", "memory_search", "memory_set"]
    assert out.tools[0] is theirs and session.names == {"memory_search", "memory_set"}
    # the fragment closes the system prompt the model reads (the request's own, else the model's default)
    assert out.system_note == session.fragment and "memory_list" not in session.fragment
    bare = session.augment(ChatRequest(model="m", messages=(Message("user", "hi"),), system_note="Be concise."))
    assert bare.messages == (Message("user", "hi"),) and bare.system_note == f"Be concise.\n\n{session.fragment}"
    memory.close()


def test_the_memory_layer_sees_only_the_engines_public_face():
    """Memory decorates the engine from outside: no protocol, no server, no engine internals."""
    from source_imports import PACKAGE, imports

    for path in sorted((PACKAGE / "memory").glob("*.py")):
        for module, _ in imports(path):
            assert not module.startswith(("tinytitan.protocols", "tinytitan.http")), f"{path.name} imports {module}"
            assert not module.startswith("tinytitan.engine"), f"{path.name} imports engine internals ({module})"
