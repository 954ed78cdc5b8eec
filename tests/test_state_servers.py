"""Several real server processes on one state — a SQLite directory, and a PostgreSQL server the tests start
themselves: each reads the responses the other stored and continues its chains; ``kill -9`` in the middle of
writes loses no acknowledged response or memory write; memory written through one server is read by another.
Without PostgreSQL installed its half is skipped here and fails under CI=true (.ci/run installs it)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from cli_helpers import ROOT, start
from pg_server import pg, state  # noqa: F401  (the fixtures: a PostgreSQL server, a state of each kind)

MODEL = "tinytitan-scripted"


def serve(tmp_path, state: str, name: str, answer: str, *extra: str):
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps([answer]))
    proc, model, base, _ = start(["--script", str(script), "--state", state, *extra])
    assert model == MODEL
    return proc, base


def create(h: httpx.Client, base: str, text: str, previous: str | None = None) -> dict:
    body = {"model": MODEL, "input": text, **({"previous_response_id": previous} if previous else {})}
    r = h.post(f"{base}/v1/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def stop(*procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_two_servers_share_stored_responses_and_chains(tmp_path, state):
    a, base_a = serve(tmp_path, state, "a", "from a")
    b, base_b = serve(tmp_path, state, "b", "from b")
    try:
        with httpx.Client() as h:
            first = create(h, base_a, "start on a")
            got = h.get(f"{base_b}/v1/responses/{first['id']}").json()  # the other server has it at once
            assert got["id"] == first["id"] and got["output"][0]["content"][0]["text"] == "from a"
            second = create(h, base_b, "continue on b", first["id"])  # a chain started on one, continued on two
            third = create(h, base_a, "and back on a", second["id"])
            items = h.get(f"{base_b}/v1/responses/{third['id']}/input_items", params={"order": "asc"}).json()
            assert [i["content"][0]["text"] for i in items["data"]] == ["and back on a"]
            # both write at once, each reads what the other wrote
            ids: dict[str, list[str]] = {base_a: [], base_b: []}

            def writer(base):
                with httpx.Client() as own:
                    for i in range(15):
                        ids[base].append(create(own, base, f"{base} {i}")["id"])

            threads = [threading.Thread(target=writer, args=(base,)) for base in ids]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for base, other in ((base_a, base_b), (base_b, base_a)):
                for rid in ids[other]:
                    assert h.get(f"{base}/v1/responses/{rid}").status_code == 200
            assert h.delete(f"{base_b}/v1/responses/{first['id']}").status_code == 200
            gone = h.post(f"{base_a}/v1/responses", json={"model": MODEL, "input": "x",
                                                         "previous_response_id": second["id"]})
            assert gone.status_code == 400 and gone.json()["error"]["code"] == "previous_response_not_found"
            assert first["id"] in gone.json()["error"]["message"]
    finally:
        stop(a, b)


def test_kill_9_during_writes_loses_no_acknowledged_response(tmp_path, state):
    """Two servers on one state; one is killed in the middle of writes, three times over; the other (and a
    restarted one) finds every response the killed one acknowledged."""
    other, base_other = serve(tmp_path, state, "other", "x")
    acknowledged: list[str] = []
    try:
        for round_ in range(3):
            proc, base = serve(tmp_path, state, f"r{round_}", f"answer {round_}")
            done = threading.Event()

            def writer():
                with httpx.Client() as h:
                    while not done.is_set():
                        try:
                            r = h.post(f"{base}/v1/responses", json={"model": MODEL, "input": "write"}, timeout=30)
                        except httpx.HTTPError:
                            return  # the server is gone mid-request: not acknowledged
                        if r.status_code == 200:
                            acknowledged.append(r.json()["id"])

            threads = [threading.Thread(target=writer) for _ in range(3)]
            for t in threads:
                t.start()
            deadline = time.time() + 30
            while len(acknowledged) < 20 * (round_ + 1) and time.time() < deadline:
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)  # in the middle of writes
            done.set()
            for t in threads:
                t.join()
            proc.wait(10)
            with httpx.Client() as h:
                lost = [rid for rid in acknowledged if h.get(f"{base_other}/v1/responses/{rid}").status_code != 200]
            assert lost == [], f"round {round_}: {len(lost)} of {len(acknowledged)} acknowledged responses lost"
    finally:
        stop(other)
    check, base = serve(tmp_path, state, "check", "x")  # and after a restart
    try:
        with httpx.Client() as h:
            lost = [rid for rid in acknowledged if h.get(f"{base}/v1/responses/{rid}").status_code != 200]
        assert len(acknowledged) >= 60 and lost == []
    finally:
        stop(check)


MEMORY_WRITER = """
import sys
from tinytitan.memory.workspace import Workspace
from tinytitan.store.db import open_database
ws = Workspace(open_database(sys.argv[1]), "tinytitan/tester/ws", "/src/ws")
i = 0
while True:
    ws.set(f"facts/{i}", f"fact {i}")
    ws.append("log", f"line {i}")
    print(i, flush=True)
    i += 1
"""


def test_kill_9_during_memory_writes_loses_no_acknowledged_write(tmp_path, state):
    from tinytitan.memory.workspace import Workspace
    from tinytitan.store.db import open_database

    acked = -1
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", MEMORY_WRITER, state], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True)
        target = acked + 40
        while acked < target:
            line = proc.stdout.readline()
            assert line, "the writer stopped"
            acked = max(acked, int(line))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # (a restart starts again at 0: every number below the highest acknowledged is a key)
    db = open_database(state)
    ws = Workspace(db, "tinytitan/tester/ws")
    keys = {r.key for r in ws.list("facts/")}
    assert all(f"facts/{i}" in keys for i in range(acked + 1))
    lines = ws.get("log").value.splitlines()
    assert f"line {acked}" in lines and len(lines) >= 120
    db.close()


def test_memory_written_through_a_server_is_read_by_another_process(tmp_path, state):
    fact = "make -j2"
    call = ('<tool_call>\n{"name": "memory_set", "arguments": {"key": "build/command", "value": "%s"}}\n'
            '</tool_call>' % fact)
    script = tmp_path / "set.json"
    script.write_text(json.dumps([call, "Saved."]))
    proc, model, base, _ = start(["--script", str(script), "--state", state, "--memory", "--memory-consolidate", "0"])
    try:
        with httpx.Client() as h:
            r = h.post(f"{base}/v1/chat/completions", timeout=60, headers={"X-TinyTitan-Workspace": "/src/shared"},
                       json={"model": model, "messages": [{"role": "user", "content": "remember"}]})
            assert r.json()["choices"][0]["message"]["content"] == "Saved."
        # another process on the same state (the memory CLI, as an operator would) reads it while it runs
        shown = subprocess.run([sys.executable, "-m", "tinytitan", "memory", "--state", state, "show", "/src/shared",
                                "build/command"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["value"] == fact
    finally:
        stop(proc)


def test_full_text_recall_is_ranked_on_either_database(state):
    """FTS5's bm25 on SQLite, tsvector's ts_rank on PostgreSQL: the same order where it matters."""
    from tinytitan.memory.workspace import Workspace
    from tinytitan.store.db import open_database

    db = open_database(state)
    j = Workspace(db, "tinytitan/tester/ranked", "/src/ranked")
    j.set("build/command", "make -j2\nthe Makefile's default target is slow", importance=4, tags=["build"])
    j.set("decisions/parser", "kept the hand-written parser: Lark cannot stream partial values", importance=5)
    j.set("notes/misc", "the build bot is named builder; nothing else", importance=1)
    j.set("a/tagged", "nothing to see", importance=5, tags=["cache"])
    j.set("cache/layout", "where prompts live", importance=1)
    assert [r.key for r in j.search("build")] == ["build/command", "notes/misc"]  # the key outranks the value
    assert [r.key for r in j.search("cache")] == ["cache/layout", "a/tagged"]  # then a tag
    assert [r.key for r in j.search("pars lark")] == ["decisions/parser"]  # words are prefixes
    assert [r.key for r in j.search("", tags=("build",))] == ["build/command"]
    assert [r.key for r in j.search("build", prefix="notes/")] == ["notes/misc"]
    assert [r.key for r in j.search("", min_importance=5)] == ["decisions/parser", "a/tagged"]  # the older first
    j.set("notes/misc", "rewritten")
    assert [r.key for r in j.search("builder")] == []  # the index follows every write
    assert Workspace(db, "tinytitan/tester/other").search("build") == []
    db.close()


def test_consolidation_transcripts_are_rows_taken_once_on_either_database(state):
    from tinytitan.memory.consolidate import keep_transcript, put_back, take_transcript
    from tinytitan.store.db import open_database

    db = open_database(state)
    for i in range(3):
        dropped = db.run(keep_transcript, f"ns/u/ws{i}", f"/src/ws{i}", "m", f"transcript {i}", 2)
        time.sleep(0.01)
    assert dropped == ["ns/u/ws0"]  # at most 2 rows: the one active longest ago goes
    assert db.run(keep_transcript, "ns/u/ws1", "/src/ws1", "m", "newer", 2) == []  # one row per workspace
    assert db.run(take_transcript, "ns/u/ws1") == ("m", "newer")
    assert db.run(take_transcript, "ns/u/ws1") is None  # taken once: a second server finds nothing
    db.run(put_back, "ns/u/ws1", "/src/ws1", "m", "newer")  # a pass cut short
    db.run(put_back, "ns/u/ws2", "/src/ws2", "m", "older")  # … never over a newer one
    assert db.run(take_transcript, "ns/u/ws2") == ("m", "transcript 2")
    assert db.run(take_transcript, "ns/u/ws1") == ("m", "newer")
    db.close()


def _at_once(*calls) -> list:
    """Each call on its own thread, released together; their results in order (an exception is a result)."""
    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # noqa: BLE001 (the test reads it)
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_two_servers_writing_one_new_memory_key_at_once_both_land(state):
    """PostgreSQL has no row to lock for a key not written yet: the second writer's insert met the first's and
    failed, losing its line. Both appends land, on either database, whatever the order."""
    from tinytitan.memory.workspace import Workspace
    from tinytitan.store.db import open_database

    a, b = open_database(state), open_database(state)
    wa, wb = Workspace(a, "tinytitan/tester/race", "/src/race"), Workspace(b, "tinytitan/tester/race", "/src/race")
    for k in range(12):
        results = _at_once(lambda: wa.append(f"log/{k}", "from A"), lambda: wb.append(f"log/{k}", "from B"))
        assert not [r for r in results if isinstance(r, Exception)], results
        assert sorted(wa.get(f"log/{k}").value.splitlines()) == ["from A", "from B"]
    results = _at_once(lambda: wa.set("fact/new", "one"), lambda: wb.set("fact/new", "two"))
    assert not [r for r in results if isinstance(r, Exception)] and wa.get("fact/new").value in ("one", "two")
    a.close()
    b.close()


def test_memory_search_finds_words_of_any_script(state):
    from tinytitan.memory.records import Refused
    from tinytitan.memory.workspace import Workspace
    from tinytitan.store.db import open_database

    db = open_database(state)
    j = Workspace(db, "tinytitan/tester/words", "/src/words")
    j.set("db/password", "пароль: hunter2 (数据库 is the staging one)", importance=2)
    j.set("notes/misc", "nothing here", importance=5)
    assert [r.key for r in j.search("пароль")] == ["db/password"]
    assert [r.key for r in j.search("Пароль")] == ["db/password"]  # (case aside)
    with pytest.raises(Refused, match="NUL"):  # PostgreSQL's text holds none: refused by name on both
        j.set("notes/nul", "a\x00b")
    db.close()


def test_one_response_deleted_by_two_servers_at_once_is_counted_off_once(state):
    """Two servers evicting (or a client retrying DELETE) the same response at once: one deletes it and counts
    its bytes off; the other deleted nothing and says so. The byte budget's counter stays the bytes stored."""
    from tinytitan.store.db import open_database
    from tinytitan.store.responses_store import ResponsesStore, StoredResponse

    a, b = ResponsesStore(open_database(state), None, None), ResponsesStore(open_database(state), None, None)

    def counted(store):
        return store.db.run(lambda tx: (tx.row("SELECT value FROM meta WHERE name = 'response_bytes'")[0],
                                        tx.row("SELECT coalesce(sum(size), 0) FROM responses")[0]))

    for k in range(12):
        a.put_sync(StoredResponse(f"resp_{k}", [{"id": f"msg_{k}", "type": "message", "role": "user",
                                                 "content": "пароль " * 100}], [], None, int(time.time())))
        deleted = _at_once(lambda: trio_run(a.delete, f"resp_{k}"), lambda: trio_run(b.delete, f"resp_{k}"))
        assert sorted(deleted) == [False, True], deleted
    stored, real = counted(a)
    assert stored == real == 0
    a.put_sync(StoredResponse("resp_x", [{"id": "msg_x", "type": "message", "role": "user", "content": "é" * 500}],
                              [], None, int(time.time())))
    assert counted(a)[0] >= 1000  # bytes, not characters: 500 two-byte characters
    a.db.close()
    b.db.close()


def trio_run(fn, *args):
    import trio

    return trio.run(fn, *args)
