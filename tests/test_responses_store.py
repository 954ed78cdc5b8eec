"""The Responses store in the state database: kept across a restart, an older JSON-lines log migrated (and kept
as a backup), retention by age and by size with the API's own error for an evicted chain, a corrupt file set
aside, a full disk that loses the record but not the answer, memory mode, the flags and the default place.
Several real server processes on one database: test_state_servers.py."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time

import openai
import pytest

from tinytitan.flags import build_parser
from tinytitan.store import db as dbm
from tinytitan.store.legacy import BACKUP_SUFFIX
from tinytitan.store.responses_store import FILE_NAME, ResponsesStore, StoredResponse, default_dir

from responses_helpers import MODEL, client, record_prompts, sse_events


def rec(i, prev=None, created=None, size=0) -> StoredResponse:
    return StoredResponse(f"r{i}", [{"id": f"in{i}", "type": "message", "role": "user", "content": "x" * size}],
                          [{"type": "response.completed", "response": {"id": f"r{i}", "output": [
                              {"id": f"out{i}", "type": "message"}]}}], prev, created or int(time.time()))


async def chain(store: ResponsesStore, response_id: str) -> tuple[list[dict], str | None] | None:
    """Every input and output item of the stored chain ending at ``response_id``, oldest first, and the id of the
    first response it continues that is not stored; None when ``response_id`` itself is not stored."""
    found = await store.chain_links(response_id)
    return None if found is None else ([item for link in found[0] for part in link for item in part], found[1])


async def test_restart_keeps_stored_responses(serve, tmp_path):
    first = await serve(["Before the restart.", "Second."], responses_store=str(tmp_path))
    c1 = client(first)
    r1 = await c1.responses.create(model=MODEL, input=[{"role": "user", "content": "a"},
                                                       {"role": "user", "content": "b"}])
    r2 = await c1.responses.create(model=MODEL, input="gone soon")
    await c1.responses.delete(r2.id)

    second = await serve(["After the restart."], responses_store=str(tmp_path))  # its own store, same file
    prompts = record_prompts(second)
    c2 = client(second)
    again = await c2.responses.retrieve(r1.id)
    assert again.output_text == "Before the restart." and again.id == r1.id
    items = await c2.responses.input_items.list(r1.id, order="asc")
    assert [i.content[0].text for i in items.data] == ["a", "b"]
    with pytest.raises(openai.NotFoundError):
        await c2.responses.retrieve(r2.id)  # the delete persisted too
    r3 = await c2.responses.create(model=MODEL, input="c", previous_response_id=r1.id)
    assert [m.content for m in prompts[0].req.messages] == ["a", "b", "Before the restart.", "c"]
    assert r3.previous_response_id == r1.id
    assert (tmp_path / dbm.FILE_NAME).is_file() and not (tmp_path / FILE_NAME).exists()


async def test_chains_items_and_deletes_are_queries(tmp_path):
    store = ResponsesStore.open(str(tmp_path))
    for i in range(5):
        await store.put(rec(i, f"r{i - 1}" if i else None))
    items, missing = await chain(store, "r4")
    assert [i["id"] for i in items] == [x for i in range(5) for x in (f"in{i}", f"out{i}")] and missing is None
    assert await store.find_item("out2") == {"id": "out2", "type": "message"}
    assert await store.delete("r1") and not await store.delete("r1")
    items, missing = await chain(store, "r4")
    assert [i["id"] for i in items][:2] == ["in2", "out2"] and missing == "r1"
    assert await chain(store, "r1") is None and await store.find_item("in1") is None
    assert await store.count() == 4


def legacy_log(path, records: list[dict], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)


async def test_an_older_log_is_migrated_verified_and_kept_as_a_backup(tmp_path, caplog):
    now = int(time.time())
    put = lambda i, prev=None: {"op": "put", "id": f"r{i}", "input": [{"id": f"in{i}"}],  # noqa: E731
                                "events": [{"response": {"id": f"r{i}", "output": [{"id": f"out{i}"}]}}],
                                "previous_response_id": prev, "created_at": now - 10 + i, "extra": {}}
    log_path = tmp_path / FILE_NAME
    legacy_log(log_path, [put(1), put(2, "r1"), {"op": "delete", "id": "r1"}, put(3, "r2"), put(4)],
               tail=b'{"op":"put","id":"r9","inp')  # a torn last record: skipped, as the older store did
    whole = log_path.read_bytes()
    caplog.set_level(logging.INFO, "tinytitan.store")
    store = ResponsesStore.open(str(tmp_path))
    assert "3 responses migrated" in caplog.text and "torn last record" in caplog.text
    assert (await store.get("r3")).response == {"id": "r3", "output": [{"id": "out3"}]}
    assert (await store.get("r3")).created_at == now - 7
    items, missing = await chain(store, "r3")
    assert [i["id"] for i in items] == ["in2", "out2", "in3", "out3"] and missing == "r1"  # r1 was deleted first
    assert await store.get("r1") is None and await store.get("r4") is not None
    assert await store.get("r9") is None
    assert not log_path.exists() and (tmp_path / (FILE_NAME + BACKUP_SUFFIX)).read_bytes() == whole
    caplog.clear()
    ResponsesStore.open(str(tmp_path))
    assert "responses migrated" not in caplog.text  # once


async def test_an_older_log_past_the_retention_age_migrates_once_and_then_ages_out(tmp_path):
    """The older store kept responses for ever: one 40 days old was evicted inside the move itself, so the move
    never verified, the log stayed, and every start moved it again, bringing back what the user deleted since.
    Retention applies after the move."""
    now = int(time.time())
    put = lambda i, days: {"op": "put", "id": f"r{i}", "input": [{"id": f"in{i}"}],  # noqa: E731
                           "events": [{"response": {"id": f"r{i}", "output": []}}], "previous_response_id": None,
                           "created_at": now - days * 86400, "extra": {}}
    legacy_log(tmp_path / FILE_NAME, [put(1, 40), put(2, 1)])
    store = ResponsesStore.open(str(tmp_path))
    assert not (tmp_path / FILE_NAME).exists()  # moved, verified, kept as the backup
    assert await store.get("r1") is None and await store.get("r2") is not None  # then aged out
    assert await store.delete("r2")
    store.db.close()
    again = ResponsesStore.open(str(tmp_path))
    assert await again.get("r2") is None  # not brought back


async def test_a_migration_that_does_not_verify_leaves_the_log(tmp_path, monkeypatch, caplog):
    legacy_log(tmp_path / FILE_NAME, [{"op": "put", "id": "r1", "input": [], "events": []}])
    real = dbm.SqliteDatabase.run

    def lossy(self, fn, *args, write=True):
        if fn.__name__ == "write":  # the migration's write "succeeds" without writing
            return None
        return real(self, fn, *args, write=write)

    monkeypatch.setattr(dbm.SqliteDatabase, "run", lossy)
    caplog.set_level(logging.ERROR, "tinytitan.store")
    ResponsesStore.open(str(tmp_path))
    assert "migration not verified" in caplog.text and (tmp_path / FILE_NAME).exists()
    monkeypatch.setattr(dbm.SqliteDatabase, "run", real)
    assert await ResponsesStore.open(str(tmp_path)).get("r1") is not None  # tried again: done
    assert not (tmp_path / FILE_NAME).exists()


@pytest.mark.parametrize("shape", [{"events": None}, {"input": 5}, {"created_at": "soon"}, {"created_at": 1e30},
                                   {"events": [{"response": {"output": 5}}]}])
async def test_an_older_log_record_of_another_shape_is_skipped_and_the_server_starts(serve, tmp_path, caplog, shape):
    """A record that is JSON but not of the shape the older store wrote (edited, or damaged into other JSON) failed
    the migration's database write: the server did not start, and no later start did either (the log stays to be
    moved again). It is skipped with a warning, as an unreadable line is, and the rest moves."""
    first = await serve(["Kept."], responses_store="memory")
    events = [data for _, data in await sse_events(first, {"model": MODEL, "input": "a", "stream": True})]
    rid = events[-1]["response"]["id"]
    item = {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]}
    put = {"op": "put", "id": rid, "input": [item], "events": events, "previous_response_id": None,
           "created_at": int(time.time()), "extra": {}}
    legacy_log(tmp_path / FILE_NAME, [put, {**put, "id": "resp_other", **shape}])
    caplog.set_level(logging.WARNING, "tinytitan.store")
    c = client(await serve(["x"], responses_store=str(tmp_path)))
    assert (await c.responses.retrieve(rid)).output_text == "Kept."
    assert [i.id for i in (await c.responses.input_items.list(rid)).data] == ["msg_1"]
    with pytest.raises(openai.NotFoundError):
        await c.responses.retrieve("resp_other")
    assert "a response that cannot be read skipped" in caplog.text and "1 responses migrated" in caplog.text
    assert (tmp_path / (FILE_NAME + BACKUP_SUFFIX)).exists() and not (tmp_path / FILE_NAME).exists()


def log_cannot_be_renamed(monkeypatch) -> None:
    """The older log's rename as its backup refused (a directory this user cannot write); other renames as ever."""
    real = os.replace

    def refused(src, dst):
        if str(src).endswith(FILE_NAME):
            raise PermissionError(13, "Permission denied", str(src))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", refused)


def logged_put(i: int) -> dict:
    """The older log's record of storing response ``resp_<i>``."""
    return {"op": "put", "id": f"resp_{i}", "input": [], "created_at": int(time.time()),
            "events": [{"response": {"id": f"resp_{i}", "output": []}}], "previous_response_id": None}


async def test_an_older_log_that_cannot_be_renamed_moves_once_and_the_server_starts(serve, tmp_path, monkeypatch,
                                                                                      caplog):
    """The older log was moved, verified, then renamed as its backup: where the rename failed (a directory this
    user cannot write: the older store's place is apart from the database's) the server did not start, and every
    later start moved the log again, bringing back what was deleted since. The database notes it moved: the
    server starts, the next one does not move it again, and once it can, a start renames it."""
    log_cannot_be_renamed(monkeypatch)
    legacy_log(tmp_path / FILE_NAME, [logged_put(1), logged_put(2)])
    caplog.set_level(logging.ERROR, "tinytitan.store")
    await client(await serve(["x"], responses_store=str(tmp_path))).responses.delete("resp_1")
    assert "cannot be renamed" in caplog.text and (tmp_path / FILE_NAME).exists()
    later = client(await serve(["x"], responses_store=str(tmp_path)))  # the log still there
    with pytest.raises(openai.NotFoundError):
        await later.responses.delete("resp_1")  # not brought back
    await later.responses.delete("resp_2")  # (moved the first time)
    monkeypatch.undo()
    ResponsesStore.open(str(tmp_path))
    assert not (tmp_path / FILE_NAME).exists() and (tmp_path / (FILE_NAME + BACKUP_SUFFIX)).exists()
    assert await ResponsesStore.open(str(tmp_path)).get("resp_1") is None


async def test_retention_by_age_and_by_size(tmp_path, caplog):
    store = ResponsesStore.open(str(tmp_path), max_age=10 * 86400)
    await store.put(rec(1, created=int(time.time()) - 11 * 86400))
    await store.put(rec(2, created=int(time.time()) - 9 * 86400))
    caplog.set_level(logging.INFO, "tinytitan.store")
    store = ResponsesStore.open(str(tmp_path), max_age=10 * 86400)  # checked at open (and once a minute)
    assert await store.get("r1") is None and await store.get("r2") is not None
    assert "older than 10 days evicted" in caplog.text

    small = ResponsesStore.open(str(tmp_path / "small"), max_age=None, max_bytes=20_000)
    for i in range(30):
        await small.put(rec(i, size=2_000))
    kept = [i for i in range(30) if await small.get(f"r{i}") is not None]
    assert kept == list(range(30 - len(kept), 30)) and 5 <= len(kept) < 10  # the newest, under the bound
    total = small.db.run(lambda tx: (tx.row("SELECT value FROM meta WHERE name = 'response_bytes'")[0],
                                     tx.row("SELECT sum(size) FROM responses")[0]))
    assert total[0] == total[1] <= 20_000
    assert small.db.run(lambda tx: tx.row("SELECT count(*) FROM response_items")[0]) == 2 * len(kept)


async def test_a_store_that_only_reads_never_serves_past_retention(tmp_path, monkeypatch):
    """Eviction by age runs at open and inside writes; a response whose retention ends while the server only
    reads is not served: not by GET, not in a chain, not by an item reference, not listed, not deleted."""
    store = ResponsesStore.open(str(tmp_path), max_age=10 * 86400)
    now = time.time()
    await store.put(rec(1, created=int(now) - 10 * 86400 + 30))  # 30 s of retention left
    await store.put(rec(2, prev="r1", created=int(now)))
    assert (await store.get("r1")) is not None and (await chain(store, "r2"))[1] is None
    monkeypatch.setattr(time, "time", lambda: now + 60)  # a minute on, nothing written since
    assert await store.get("r1") is None and await store.find_item("in1") is None
    assert await store.input_page("r1", 20, "asc", None, None) is None
    items, missing = await chain(store, "r2")
    assert missing == "r1" and [i["id"] for i in items] == ["in2", "out2"]
    assert await store.delete("r1") is False and await store.get("r2") is not None
    assert await store.count() == 1


async def test_an_evicted_previous_response_id_is_the_apis_not_found(serve, tmp_path):
    s = await serve(["one", "two", "three"], responses_store=str(tmp_path))
    c = client(s)
    r1 = await c.responses.create(model=MODEL, input="a")
    r2 = await c.responses.create(model=MODEL, input="b", previous_response_id=r1.id)
    tight = ResponsesStore.open(str(tmp_path), max_bytes=1)  # another server with a tighter bound evicts both
    await tight.put(rec(1))
    for rid, named in ((r2.id, r2.id), (r1.id, r1.id)):
        with pytest.raises(openai.BadRequestError) as e:
            await c.responses.create(model=MODEL, input="c", previous_response_id=rid)
        body = e.value.body
        assert body["code"] == "previous_response_not_found" and body["param"] == "previous_response_id"
        assert f"Previous response with id '{named}' not found." in body["message"]
    with pytest.raises(openai.NotFoundError) as e:
        await c.responses.retrieve(r1.id)
    assert "evicted" in e.value.message


async def test_a_corrupt_database_is_set_aside_never_emptied(tmp_path, caplog):
    path = tmp_path / dbm.FILE_NAME
    garbage = b"this is not a database" * 100
    path.write_bytes(garbage)
    caplog.set_level(logging.ERROR, "tinytitan.store")
    store = ResponsesStore.open(str(tmp_path))
    (aside,) = tmp_path.glob(dbm.FILE_NAME + ".corrupt-*")
    assert aside.read_bytes() == garbage and "is corrupt" in caplog.text and str(aside) in caplog.text
    await store.put(rec(1))
    assert await ResponsesStore.open(str(tmp_path)).get("r1") is not None


def tmpfs(path, size: str) -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


async def test_a_full_disk_loses_the_record_not_the_answer(serve, tmp_path, caplog, monkeypatch):
    where = tmp_path / "small"
    mounted = os.geteuid() == 0 and tmpfs(where, "400k")  # a real full disk where this machine lets us
    try:
        s = await serve(["Answered.", "Answered too.", "Third."], responses_store=str(where))
        c = client(s)
        first = await c.responses.create(model=MODEL, input="fits")
        caplog.set_level(logging.ERROR, "tinytitan.responses")
        if mounted:
            with open(where / "filler", "wb") as f:  # the disk is full from here on
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
        else:  # no mount allowed: the error SQLite raises then, injected
            def full(self, fn, *args, write=True):
                raise sqlite3.OperationalError("database or disk is full")

            monkeypatch.setattr(dbm.SqliteDatabase, "run", full)
        r = await c.responses.create(model=MODEL, input="y" * 40_000)
        assert r.output_text == "Answered too."  # the client has its answer …
        assert f"could not store response {r.id}" in caplog.text and "full" in caplog.text  # … the log says
        if not mounted:
            monkeypatch.undo()
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(r.id)  # never reported as stored
        assert (await c.responses.retrieve(first.id)).output_text == "Answered."  # nothing before it lost
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


async def test_memory_store_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    store = ResponsesStore.open("memory")
    await store.put(StoredResponse("r", [], []))
    assert await store.get("r") is not None and not store.persistent and not any(tmp_path.iterdir())


def test_default_places(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert dbm.db_path(None) == tmp_path / "state" / "tinytitan" / "state.db"
    assert default_dir() == tmp_path / "state" / "tinytitan" / "responses"  # the older log, migrated from
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert dbm.db_path(None) == tmp_path / ".local" / "state" / "tinytitan" / "state.db"
    assert dbm.db_path(str(tmp_path / "x.db")) == tmp_path / "x.db"


def test_cli_flags(monkeypatch):
    args = build_parser().parse_args(["serve", "--responses-store", "memory"])
    assert args.responses_store == "memory"
    args = build_parser().parse_args(["serve"])
    assert args.responses_store is None and args.state is None  # the state directory
    assert (args.responses_retention_days, args.responses_max_mib) == (30.0, 2048)
    monkeypatch.setenv("TINYTITAN_STATE", "postgresql://db.example/tinytitan")
    assert build_parser().parse_args(["serve"]).state == "postgresql://db.example/tinytitan"
    assert build_parser().parse_args(["serve", "--state", "/srv/state"]).state == "/srv/state"
    assert dbm.redact("postgresql://u:secret@h:5432/d") == "postgresql://u:***@h:5432/d"


async def test_a_store_that_cannot_be_read_is_a_503_never_a_500(serve, tmp_path, monkeypatch, caplog):
    s = await serve(["Answered."], responses_store=str(tmp_path))
    c = client(s)
    r = await c.responses.create(model=MODEL, input="hi")

    def broken(self, fn, *args, write=True):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(dbm.SqliteDatabase, "run", broken)
    for call in (c.responses.retrieve(r.id), c.responses.input_items.list(r.id), c.responses.delete(r.id),
                 c.responses.create(model=MODEL, input="more", previous_response_id=r.id)):
        with pytest.raises(openai.InternalServerError) as e:
            await call
        assert e.value.status_code == 503 and "response store cannot be" in e.value.message
    assert "malformed" in caplog.text


async def test_a_stored_row_whose_json_is_damaged_is_a_503_never_a_500(serve, tmp_path, caplog):
    """The database checks its pages, not the JSON text a row holds: a row cut short there (a bad sector, a bit
    flipped) made every request that read that response a 500, its GET, its input_items, a chain through it and
    a reference to its items alike. It is the 503 naming the store that a damaged file gets, the log names the
    response, and the others are served as before."""
    s = await serve(["One.", "Two."], responses_store=str(tmp_path))
    c = client(s)
    damaged = await c.responses.create(model=MODEL, input="a")
    kept = await c.responses.create(model=MODEL, input="b")
    con = sqlite3.connect(tmp_path / dbm.FILE_NAME)
    with con:
        con.execute("UPDATE responses SET events = substr(events, 1, 40) WHERE id = ?", (damaged.id,))
        con.execute("UPDATE response_items SET body = substr(body, 1, 20) WHERE response_id = ?", (damaged.id,))
    con.close()
    caplog.set_level(logging.ERROR, "tinytitan.store")
    for call in (c.responses.retrieve(damaged.id), c.responses.input_items.list(damaged.id),
                 c.responses.create(model=MODEL, input="c", previous_response_id=damaged.id),
                 c.responses.create(model=MODEL, input=[{"type": "item_reference", "id": damaged.output[0].id}])):
        with pytest.raises(openai.InternalServerError) as e:
            await call
        assert e.value.status_code == 503 and "response store cannot be read" in e.value.message
    assert f"'{damaged.id}'" in caplog.text and "JSON is damaged" in caplog.text
    assert (await c.responses.retrieve(kept.id)).output_text == "Two."
    assert [i.content[0].text for i in (await c.responses.input_items.list(kept.id)).data] == ["b"]


def test_a_state_that_cannot_be_opened_stops_the_server_saying_why(tmp_path):
    from cli_helpers import ROOT

    blocker = tmp_path / "file"
    blocker.write_text("")
    (tmp_path / "s.json").write_text('["x"]')
    done = subprocess.run([sys.executable, "-m", "tinytitan", "serve", "--port", "0", "--script",
                           str(tmp_path / "s.json"), "--state", str(blocker / "state")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"the state database {blocker / 'state' / 'state.db'} cannot be opened" in done.stderr


async def test_another_log_put_where_a_noted_one_was_is_moved_too(serve, tmp_path, monkeypatch):
    """A log that moved but could not be renamed is noted, so it is not moved again; the note names that very file.
    Another log put at the same path later (an older server run again; or, on a database several machines share,
    another machine's log at the same path) was taken for the noted one: never moved, its responses never in the
    database."""
    log_cannot_be_renamed(monkeypatch)
    legacy_log(tmp_path / FILE_NAME, [logged_put(1)])
    await client(await serve(["x"], responses_store=str(tmp_path))).responses.delete("resp_1")  # (moved)
    legacy_log(tmp_path / FILE_NAME, [logged_put(2), logged_put(3)])  # another log in its place
    later = client(await serve(["x"], responses_store=str(tmp_path)))
    await later.responses.delete("resp_3")  # moved too (a 404 where it was taken for the noted one)
