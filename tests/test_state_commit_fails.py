"""A transaction whose commit fails is rolled back: the thread's connection serves the next call. (A commit can
fail where every statement before it succeeded: a full disk or an I/O error at the write-out, a deferred
constraint; here the last, which SQLite checks at COMMIT.) Before, the transaction stayed open on that thread's
connection, and every later call there failed with "cannot start a transaction within a transaction"."""

import sqlite3

import pytest

from tinytitan.store.db import SqliteDatabase


def tables(tx):
    tx.exec("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    tx.exec("CREATE TABLE child (pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")


def orphan(tx):
    tx.exec("INSERT INTO child (pid) VALUES (7)")  # (checked at COMMIT: no parent 7)


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_failed_commit_leaves_the_connection_usable(tmp_path, where):
    db = SqliteDatabase(tmp_path / "state.db" if where == "file" else None)
    db.run(tables)
    with pytest.raises(sqlite3.IntegrityError):
        db.run(orphan)
    assert db.run(lambda tx: tx.row("SELECT count(*) FROM child"), write=False) == (0,)  # rolled back
    db.run(lambda tx: tx.exec("INSERT INTO parent (id) VALUES (7)"))
    db.run(orphan)
    assert db.run(lambda tx: tx.row("SELECT count(*) FROM child"), write=False) == (1,)
    db.close()
