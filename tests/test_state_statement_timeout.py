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
from test_state_servers import pg  # noqa: F401 (the fixture: a PostgreSQL server the tests start)
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


def test_the_bound_leaves_what_the_url_sets_itself():
    params = dbm._bounds("postgresql://u@h/d?options=-c%20statement_timeout%3D5000&keepalives=0", 30)
    assert params["options"] == "-c statement_timeout=30000 -c statement_timeout=5000"  # (the server takes the last)
    assert "keepalives" not in params and params["tcp_user_timeout"] == 30000
    assert dbm._bounds("postgresql://u@h/d", 0.25)["options"] == "-c statement_timeout=250"
