"""A state database damaged past its first pages is found at start (``PRAGMA quick_check``) and set aside as a
file that is not a database is, with one error naming the file and how to recover it — not found by the first
request that reads there (a 503 in the middle of a session). The check is bounded in time: past the bound, a
big file is served and its damage found when read, as before."""

from __future__ import annotations

import logging
import sqlite3
import time

from tinytitan.store import db as dbm
from tinytitan.store.responses_store import ResponsesStore, StoredResponse


def rec(i: int) -> StoredResponse:
    return StoredResponse(f"resp_{i:04d}", [{"id": f"in{i}", "type": "message", "role": "user", "content": "x" * 1500}],
                          [{"type": "response.completed", "response": {"id": f"resp_{i:04d}", "output": []}}], None,
                          int(time.time()))


def damaged_state(tmp_path, kept: str = "resp_0150"):
    """A state directory whose responses fill a few hundred pages, one of them (the one holding ``kept``)
    overwritten with garbage, as a bad sector or a torn copy leaves it; the first page is intact."""
    store = ResponsesStore.open(str(tmp_path))
    for i in range(300):
        store.put_sync(rec(i))
    store.db.close()
    path = tmp_path / dbm.FILE_NAME
    with sqlite3.connect(path) as conn:  # everything into the main file, the WAL emptied
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    at = data.index(kept.encode()) // size * size
    assert at > size * 4
    data[at:at + size] = b"\xa5" * size
    path.write_bytes(bytes(data))
    return path, bytes(data)


def set_aside(where) -> list:
    return [p for p in where.glob(dbm.FILE_NAME + ".corrupt-*") if not p.name.endswith(("-wal", "-shm"))]


async def test_a_page_damaged_past_the_first_is_found_at_start_and_set_aside(tmp_path, caplog):
    path, damaged = damaged_state(tmp_path)
    caplog.set_level(logging.ERROR, "tinytitan.store")
    store = ResponsesStore.open(str(tmp_path))
    (aside,) = set_aside(tmp_path)
    assert aside.read_bytes() == damaged  # untouched
    said = caplog.text
    assert str(path) in said and "is corrupt" in said and "found by PRAGMA quick_check at start" in said
    assert f"sqlite3 {aside} .recover | sqlite3 {aside}.recovered" in said
    assert await store.get("resp_0150") is None  # a new database: no 503 waits for a request that reads there
    await store.put(rec(1))
    assert await ResponsesStore.open(str(tmp_path)).get("resp_0001") is not None


def test_the_check_is_bounded_in_time(tmp_path, caplog, monkeypatch):
    """Past ``CHECK_SECONDS`` (0 here, as for a file too big to read whole at start) the file is served as it is,
    said in the log."""
    store = ResponsesStore.open(str(tmp_path))
    for i in range(300):
        store.put_sync(rec(i))
    store.db.close()
    monkeypatch.setattr(dbm, "CHECK_SECONDS", 0.0)
    caplog.set_level(logging.INFO, "tinytitan.store")
    ResponsesStore.open(str(tmp_path))
    assert not set_aside(tmp_path)
    assert "checked for 0 s at start, not to its end" in caplog.text


def test_a_sound_file_is_kept(tmp_path, caplog):
    store = ResponsesStore.open(str(tmp_path))
    store.put_sync(rec(1))
    store.db.close()
    caplog.set_level(logging.INFO, "tinytitan.store")
    assert ResponsesStore.open(str(tmp_path)).db.run(lambda tx: tx.row("SELECT count(*) FROM responses")[0]) == 1
    assert not set_aside(tmp_path) and "not to its end" not in caplog.text


def test_a_file_another_server_set_aside_while_this_one_checked_it_is_not_moved_again(tmp_path, monkeypatch, caplog):
    """Two servers started together on one damaged file both found it so. The one that moved it second moved the
    new database the first had started in its place: the two went on in two files, and in the same second that
    move went over the first one's copy of the damaged file, the copy to recover from. A file that is no longer
    the one checked is left where it is, and used."""
    path, damaged = damaged_state(tmp_path)
    real, started = dbm.SqliteDatabase._set_aside, []

    def the_other_server_first(self, exc):  # the other server's whole start, between this one's check and its move
        if not started:
            started.append(True)
            other = dbm.SqliteDatabase(path)  # (its check finds the damage too, and moves the file: the real move)
            other.run(lambda tx: tx.exec("INSERT INTO meta (name, value) VALUES ('mark', 7)"))
        return real(self, exc)

    monkeypatch.setattr(dbm.SqliteDatabase, "_set_aside", the_other_server_first)
    caplog.set_level(logging.WARNING, "tinytitan.store")
    mine = dbm.SqliteDatabase(path)
    (aside,) = set_aside(tmp_path)
    assert aside.read_bytes() == damaged  # the one copy, untouched
    assert mine.run(lambda tx: tx.row("SELECT value FROM meta WHERE name = 'mark'")) == (7,)  # one database
    assert "already set aside by another server" in caplog.text


def test_a_damaged_file_that_looks_like_another_one_is_still_set_aside(tmp_path, monkeypatch):
    """Where the file at the path no longer looks like the one checked (a filesystem that gives one file a new inode
    number at each look, or another server's new file that is damaged too), and it is damaged, it is moved aside
    as any damaged file: the server starts on a new one, where it stopped at start with the damage's traceback."""
    path, damaged = damaged_state(tmp_path)
    looks = iter(range(1000))
    monkeypatch.setattr(dbm, "_identity", lambda p: (0, next(looks)))
    db = dbm.SqliteDatabase(path)
    (aside,) = set_aside(tmp_path)
    assert aside.read_bytes() == damaged
    assert db.run(lambda tx: tx.row("SELECT count(*) FROM meta"))[0] >= 0
