"""The memory store: the journal's contract, its durability and locking, keys, scopes, the bootstrap bound and
the tool executor — everything below the request path."""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.memory import fragment, tools
from tinytitan.memory.journal import MAX_VALUE_BYTES, Journal, WriteFailed
from tinytitan.memory.keys import Refused, parse_key, parse_prefix
from tinytitan.memory.scope import declared_in_system, derive, workspace_id
from tinytitan.memory.service import Memory, MemoryConfig, journal_path


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ns" / "user" / "ws" / "journal.ndjson"


def opened(path, **kw) -> Journal:
    return Journal.open(path, "/src/project", barrier_delay=0.05, **kw)


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
    created = j.get("build/command").created
    j.set("build/command", "make -j4")  # a rewrite keeps the creation time and the metadata
    rec = j.get("build/command")
    assert (rec.value, rec.created, rec.importance, rec.tags) == ("make -j4", created, 4, ("build",))
    assert rec.updated >= created
    j.append("notes/misc", "second line")
    assert j.get("notes/misc").value.endswith("nothing else\nsecond line")
    j.append("notes/new", "first")
    assert j.get("notes/new").value == "first"
    assert j.delete("notes/misc") and not j.delete("notes/misc")
    assert j.get("notes/misc") is None
    j.close()


def test_state_survives_a_restart(path):
    j = opened(path)
    j.set("a/b", "one", importance=2, confidence=0.5, tags=["x"])
    j.append("a/b", "two")
    j.set("c", "three")
    j.delete("c")
    before = {k: r.full() for k, r in j.records.items()}
    j.close()
    again = opened(path)
    assert {k: r.full() for k, r in again.records.items()} == before
    assert again.workspace_path == "/src/project"
    again.close()


def test_a_torn_last_line_is_dropped_and_nothing_before_it(path, caplog):
    j = opened(path)
    j.set("k1", "v1")
    j.set("k2", "v2")
    j.close()
    with open(path, "ab") as f:
        f.write(b'{"op":"set","key":"k3","val')  # a crash mid-write
    reader = Journal.read(path)  # a reader skips it and changes nothing
    assert sorted(reader.records) == ["k1", "k2"]
    assert path.read_bytes().endswith(b'"val')
    j = opened(path)
    assert sorted(j.records) == ["k1", "k2"]
    j.set("k3", "v3")  # starts on a clean line: the torn tail was cut
    j.close()
    assert sorted(opened(path).records) == ["k1", "k2", "k3"]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_one_writer_per_workspace(path):
    first = opened(path)
    first.set("shared", "from the first")
    second = opened(path)
    assert first.persistent and not second.persistent
    assert "another server" in second.why_not
    assert second.get("shared").value == "from the first"  # it still reads what was there
    second.set("only/here", "lost at the end")
    assert second.get("only/here") is not None
    second.close()
    first.close()
    third = opened(path)
    assert third.persistent and third.get("only/here") is None
    third.close()


def test_files_are_the_owners_only(tmp_path):
    memory = Memory(MemoryConfig(directory=tmp_path / "mem", launch_dir="/src/project", user="me", home="/home/me"))
    j = memory.journals[("tinytitan", "me", workspace_id("/src/project"))]
    memory.close()
    assert stat.S_IMODE(os.stat(j.path).st_mode) == 0o600
    for d in (tmp_path / "mem", j.path.parent, j.path.parent.parent):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_a_failed_write_changes_nothing_and_says_so(path):
    j = opened(path)
    j.set("k", "before")
    os.close(j._fd)
    j._fd = os.open(os.devnull, os.O_RDONLY)  # writes now fail with EBADF
    with pytest.raises(WriteFailed):
        j.set("k", "after")
    assert j.get("k").value == "before"
    text, ok = tools.execute(j, "memory_set", json.dumps({"key": "k", "value": "after"}))
    assert not ok and "not saved" in json.loads(text)["error"]
    assert j.get("k").value == "before"
    j.close()


def test_a_journal_that_cannot_be_opened_keeps_memory_in_ram(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    j = Journal.open(blocker / "journal.ndjson")  # its directory cannot exist
    assert not j.persistent and "cannot be opened" in j.why_not
    j.set("k", "v")
    assert j.get("k").value == "v"
    text = fragment.bootstrap(j, "proj", ("memory_get",))
    assert "will not outlive it" in text


def test_fsync_inline_or_by_a_barrier_shortly_after(path, monkeypatch):
    import time

    import tinytitan.memory.journal as journal_module

    synced = []
    real = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (synced.append(time.monotonic()), real(fd)))
    j = opened(path, fsync=True)
    synced.clear()
    j.set("k", "v")
    assert len(synced) == 1  # inline: durable before set returns
    j.close()
    synced.clear()
    j = opened(path)  # barrier_delay 0.05 s
    written = time.monotonic()
    j.set("k2", "v2")
    j.set("k3", "v3")
    assert synced == []  # the writes themselves do not wait for the disk
    deadline = time.monotonic() + 10
    while not synced and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(synced) == 1 and synced[0] - written >= 0.05  # one barrier for both writes, after the delay
    j.close()
    assert sorted(Journal.read(path).records) == ["k", "k2", "k3"]


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
    j.close()


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
    assert j.records == {}
    text, ok = tools.execute(j, "memory_set", '{"key": "k", "value": "v", "importance": 5, "tags": ["t"]}')
    assert ok and json.loads(text)["saved"] == "k"
    assert json.loads(tools.execute(j, "memory_get", '{"key": "k"}')[0])["value"] == "v"
    assert json.loads(tools.execute(j, "memory_get", '{"key": "nope"}')[0]) == {"key": "nope", "found": False}
    listed = json.loads(tools.execute(j, "memory_list", "{}")[0])
    assert listed["count"] == 1 and listed["keys"][0]["summary"] == "v"
    assert json.loads(tools.execute(j, "memory_search", '{"text": "k"}')[0])["results"][0]["key"] == "k"
    j.close()


def test_results_are_capped(path):
    j = opened(path)
    for i in range(150):
        j.set(f"k/{i:03}", f"value {i} " + "z" * 500)
    listed = json.loads(tools.execute(j, "memory_list", '{"prefix": "k/"}')[0])
    assert listed["count"] == 150 and len(listed["keys"]) == tools.MAX_LIST and "narrow" in listed["note"]
    assert all(len(k["summary"]) <= 200 for k in listed["keys"])
    hits = json.loads(tools.execute(j, "memory_search", '{"text": "value", "limit": 20}')[0])["results"]
    assert len(hits) == 20
    j.close()


def test_log_lines_carry_sizes_never_contents(path, caplog):
    secret = "hunter2-the-database-password"
    with caplog.at_level(logging.DEBUG, logger="tinytitan"):
        j = opened(path)
        tools.execute(j, "memory_set", json.dumps({"key": "creds/db-hunter2", "value": secret}))
        tools.execute(j, "memory_append", json.dumps({"key": "creds/db-hunter2", "text": secret}))
        tools.execute(j, "memory_get", json.dumps({"key": "creds/db-hunter2"}))
        tools.execute(j, "memory_delete", json.dumps({"key": "creds/db-hunter2"}))
        j.close()
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
    j.close()


# -- scope ---------------------------------------------------------------------------------------------------
def req(*system: str, header: str | None = None) -> ChatRequest:
    return ChatRequest(model="m", messages=tuple(Message("system", s) for s in system) + (Message("user", "hi"),),
                       workspace=header)


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
        assert derive(req(header=bad), "/src/launch", home=home).path == "/src/launch", bad
    assert derive(req(header="/home/me"), "/home/me", home=home) is None
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
    assert journal_path(tmp_path, one.scope).is_file()
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

    # reads work while the server holds the workspace
    code, out, _ = cli("projects")
    assert code == 0 and ws in out and "2 records" in out and "/src/proj" in out and "held by a server" in out
    assert cli("list", ws)[1].splitlines() == ["build/command\t3\tmake -j2", "notes/other\t3\tx"]
    assert cli("list", "/src/proj", "build/")[1].splitlines() == ["build/command\t3\tmake -j2"]
    assert json.loads(cli("show", ws, "build/command")[1])["value"] == "make -j2\nslow otherwise"
    code, _, err = cli("show", ws, "../x")
    assert code == 1 and "starts with '.'" in err
    # changes are refused while it is held
    code, _, err = cli("delete", ws, "notes/other")
    assert code == 1 and "a server holds" in err
    assert cli("forget", ws, "--yes")[0] == 1
    memory.close()
    assert cli("delete", ws, "notes/other") == (0, "deleted notes/other\n", "")
    assert cli("list", ws)[1].splitlines() == ["build/command\t3\tmake -j2"]
    code, _, err = cli("forget", ws)
    assert code == 1 and "--yes" in err
    assert cli("forget", ws, "--yes")[:2] == (0, "forgot 1 records\n")
    code, _, err = cli("list", ws)
    assert code == 1 and "no memory for workspace" in err
    assert "no memory under" in cli("projects")[1]


def test_a_bloated_journal_is_compacted_at_open_and_stays_locked(path):
    j = opened(path)
    j.set("kept", "first", importance=5, tags=["t"])
    created = j.get("kept").created
    for i in range(700):
        j.set("churn", f"version {i}")
    j.append("kept", "more")
    before = {k: r.full() for k, r in j.records.items()}
    j.close()
    assert len(path.read_text().splitlines()) > 700
    j = opened(path)
    assert len(path.read_text().splitlines()) == 3  # the workspace, and one record per key
    assert {k: r.full() for k, r in j.records.items()} == before and j.get("kept").created == created
    assert not opened(path).persistent  # the rewritten file is the locked one
    j.set("after", "x")
    j.close()
    assert sorted(Journal.read(path).records) == ["after", "churn", "kept"]
    assert Journal.read(path).workspace_path == "/src/project"


def test_a_tool_that_breaks_answers_an_error(path, monkeypatch):
    j = opened(path)
    monkeypatch.setattr(Journal, "list", lambda self, prefix="": 1 / 0)
    text, ok = tools.execute(j, "memory_list", "{}")
    assert not ok and "ZeroDivisionError" in json.loads(text)["error"]
    j.close()


def test_a_client_tool_of_the_same_name_stays_the_clients(tmp_path):
    from tinytitan.chat_request import Tool

    memory = Memory(MemoryConfig(directory=tmp_path, launch_dir="/src/proj", user="me", home="/home/me",
                                 tools="minimal"))
    session = memory.session(req())
    theirs = Tool("memory_get", "the client's own")
    out = session.augment(req().with_(tools=(theirs,)))
    assert [t.name for t in out.tools] == ["memory_get", "memory_search", "memory_set"]
    assert out.tools[0] is theirs and session.names == {"memory_search", "memory_set"}
    assert out.messages[0].content.endswith(session.fragment) and "memory_list" not in session.fragment
    bare = session.augment(ChatRequest(model="m", messages=(Message("user", "hi"),)))
    assert bare.messages[0] == Message("system", session.fragment)
    memory.close()


def test_the_memory_layer_sees_only_the_engines_public_face():
    """Memory decorates the engine from outside: no protocol, no server, no engine internals."""
    from test_boundaries import PACKAGE, imports

    for path in sorted((PACKAGE / "memory").glob("*.py")):
        for module, _ in imports(path):
            assert not module.startswith(("tinytitan.protocols", "tinytitan.http")), f"{path.name} imports {module}"
            assert not module.startswith("tinytitan.engine"), f"{path.name} imports engine internals ({module})"
