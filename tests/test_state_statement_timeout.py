"""A database statement is bounded in time (db.STATEMENT_SECONDS): a PostgreSQL server that does not answer (here: a
table another session holds locked, which the server waits on for ever by default) makes a read the same 503
naming the store that a lost server gives, within the bound, not a request held for hours. The URL's own
settings are left as it says them."""

from __future__ import annotations

import openai
import psycopg
import pytest
import trio

from responses_helpers import MODEL, client
from pg_server import pg  # noqa: F401 (the fixture: a PostgreSQL server the tests start)
from tinytitan.store import db as dbm


async def test_a_stalled_postgresql_read_is_a_503_within_the_bound(serve, pg, monkeypatch):  # noqa: F811
    url = pg.new_database()
    monkeypatch.setattr(dbm, "STATEMENT_SECONDS", 0.5, raising=False)  # (raising=False: absent before the bound)
    s = await serve(["Answered."], responses_store=url)
    c = client(s)
    r = await c.responses.create(model=MODEL, input="hi")
    with psycopg.connect(url) as locker:  # a transaction that holds the table: every read of it waits
        locker.execute("LOCK TABLE responses IN ACCESS EXCLUSIVE MODE")
        try:
            with trio.fail_after(15):  # (unbounded, the read waits for as long as the lock is held)
                for call in (c.responses.retrieve(r.id),
                             c.responses.create(model=MODEL, input="more", previous_response_id=r.id)):
                    with pytest.raises(openai.InternalServerError) as e:
                        await call
                    assert e.value.status_code == 503 and "response store cannot be read" in e.value.message
        finally:
            locker.rollback()
    assert (await c.responses.retrieve(r.id)).id == r.id  # the lock gone, the store answers again


def test_the_bound_leaves_what_the_url_sets_itself(pg, monkeypatch):  # noqa: F811
    """A URL (or PGOPTIONS) that says its own statement_timeout, or its own keepalives, keeps them."""
    monkeypatch.delenv("PGOPTIONS", raising=False)
    url = pg.new_database()
    db = dbm.PostgresDatabase(f"{url}{'&' if '?' in url else '?'}options=-c%20statement_timeout%3D5000")
    try:
        assert db.run(lambda tx: tx.row("SHOW statement_timeout")[0]) == "5s"
    finally:
        db.close()
    params, ms = dbm._bounds("postgresql://u@h/d?keepalives=0", 30)
    assert "keepalives" not in params and params["tcp_user_timeout"] == 30000 and ms == 30000
    assert dbm._bounds("postgresql://u@h/d", 0.25)[1] == 250
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=7000")
    assert dbm._bounds("postgresql://u@h/d", 30)[1] is None


def test_the_bound_keeps_the_options_the_environment_gives(pg, monkeypatch):  # noqa: F811
    """libpq reads PGOPTIONS only where the connection string sets no ``options``: the bound must not be one, or a
    server run with PGOPTIONS (a search_path, a role's settings) silently loses them."""
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=12345kB")
    db = dbm.PostgresDatabase(pg.new_database())
    try:
        shown = db.run(lambda tx: (tx.row("SHOW work_mem")[0], tx.row("SHOW statement_timeout")[0]))
    finally:
        db.close()
    assert shown == ("12345kB", "30s")


def test_the_bound_passes_a_pooler_that_refuses_startup_options(pg, monkeypatch):  # noqa: F811
    """PgBouncer (and the poolers of managed PostgreSQL built on it) refuses a connection whose startup packet
    carries ``options`` it does not track ("unsupported startup parameter: options"): the bound is set inside each
    transaction, so a state URL through a pooler still opens, and its statements are still bounded."""
    url = pg.new_database()
    real = psycopg.connect

    def pooler(conninfo="", **kwargs):  # what such a pooler answers to a startup packet with options
        if "options" in kwargs or "options" in psycopg.conninfo.conninfo_to_dict(conninfo):
            raise psycopg.OperationalError("FATAL:  unsupported startup parameter: options")
        return real(conninfo, **kwargs)

    monkeypatch.delenv("PGOPTIONS", raising=False)
    monkeypatch.setattr(psycopg, "connect", pooler)  # (the module the database imports when it opens)
    db = dbm.open_database(url)  # (a StateUnavailable here: the server would not start)
    try:
        assert db.run(lambda tx: tx.row("SHOW statement_timeout")[0]) == "30s"
    finally:
        db.close()
