"""The workspace cap (``--memory-max-workspaces``) holds when two servers of one PostgreSQL database register
new workspaces at the same moment: each counts the workspaces, and both counted before either had committed, so
both got in past the cap. (SQLite writes one transaction at a time: it never raced.)"""

from __future__ import annotations

import threading

import pytest

from pg_server import pg  # noqa: F401  (the module's PostgreSQL server)
from tinytitan.memory.workspace import Workspace, WorkspacesFull
from tinytitan.store.db import open_database


def test_two_new_workspaces_at_once_do_not_pass_the_cap(pg):  # noqa: F811
    url = pg.new_database()
    one, two = open_database(url), open_database(url)
    try:
        Workspace(one, "tinytitan/me/first", "/src/first", max_workspaces=2).set("a", "b")
        a = Workspace(one, "tinytitan/me/second", "/src/second", max_workspaces=2)
        b = Workspace(two, "tinytitan/me/third", "/src/third", max_workspaces=2)
        counted, release, outcome = threading.Event(), threading.Event(), {}

        def first_writer():  # registers its workspace, and holds its transaction open a moment
            def register(tx):
                a._register(tx)
                counted.set()
                release.wait(3)
            one.run(register)

        def second_writer():
            try:
                b.set("c", "d")
                outcome["b"] = "saved"
            except WorkspacesFull:
                outcome["b"] = "refused"

        t1 = threading.Thread(target=first_writer)
        t1.start()
        assert counted.wait(10)
        t2 = threading.Thread(target=second_writer)
        t2.start()
        t2.join(0.5)  # (with the cap held, it waits for the first writer's transaction)
        release.set()
        t1.join(10)
        t2.join(10)
        assert outcome == {"b": "refused"}
        assert one.run(lambda tx: tx.row("SELECT count(*) FROM memory_workspaces"))[0] == 2
    finally:
        one.close()
        two.close()
