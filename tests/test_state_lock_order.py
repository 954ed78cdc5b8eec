"""Writers of the responses store take the byte count's row before any response's (PostgreSQL: row locks). A
DELETE that had locked a response and then wanted the count, while a write held the count and was evicting that
same response for size, deadlocked: PostgreSQL cancelled one of the two (a 503 for the DELETE, or a stored
response lost after its answer). On SQLite a write holds the whole database, so the order cannot deadlock there;
the test runs on both."""

from __future__ import annotations

import threading
import time

from tinytitan.store.responses_store import ResponsesStore, StoredResponse, _delete
from pg_server import pg, state  # noqa: F401  (the fixtures: a SQLite directory, a PostgreSQL database)


def rec(i: int, size: int) -> StoredResponse:
    return StoredResponse(f"r{i}", [{"id": f"in{i}", "type": "message", "role": "user", "content": "x" * size}],
                          [{"type": "response.completed", "response": {"id": f"r{i}", "output": []}}], None,
                          int(time.time()) - 100 + i)


HOLD = 1.5  # seconds: past PostgreSQL's deadlock_timeout (1 s), which reports a deadlock


def test_a_delete_and_an_eviction_of_the_same_response_do_not_deadlock(state):  # noqa: F811
    store = ResponsesStore.open(state, max_age=None, max_bytes=None)
    store.put_sync(rec(1, 4_000))
    store.put_sync(rec(2, 100))
    tight = ResponsesStore(store.db, max_age=None, max_bytes=5_000)  # the next write evicts r1 for size
    deleting, errors = threading.Event(), []

    class CountsSlowly:
        """The DELETE's transaction, pausing before it changes the count: the write below meanwhile takes the
        count, if it can, and reaches r1."""

        def __init__(self, tx):
            self.tx, self.dialect = tx, tx.dialect
            self.row, self.rows = tx.row, tx.rows

        def exec(self, sql, params=()):
            if sql.startswith("UPDATE meta") and not deleting.is_set():
                deleting.set()
                time.sleep(HOLD)
            return self.tx.exec(sql, params)

    def delete_slowly(tx):
        return _delete(CountsSlowly(tx), "r1")

    def run(fn) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - what the test reports
            errors.append(exc)

    deleter = threading.Thread(target=run, args=(lambda: store.db.run(delete_slowly),))
    deleter.start()
    assert deleting.wait(10)
    run(lambda: tight.put_sync(rec(3, 2_000)))
    deleter.join(30)
    assert errors == []
    assert store.db.run(lambda tx: [r[0] for r in tx.rows("SELECT id FROM responses ORDER BY id")], write=False) \
        == ["r2", "r3"]
    counted = store.db.run(lambda tx: (tx.row("SELECT value FROM meta WHERE name = 'response_bytes'")[0],
                                       tx.row("SELECT sum(size) FROM responses")[0]), write=False)
    assert counted[0] == counted[1]
