"""Stored Responses objects, event-sourced, in the state database (db.py).

Rules:
- A stored response is its own input items (item references resolved, ids assigned), the id of the
  response it continued, and its event log: the wire events its machine emitted. GET answers the
  ``response`` inside the last event; ``previous_response_id`` replays input and output of the chain.
- Tables (schema.py): ``responses`` (one row each: the event log, the id it continued, its size) and
  ``response_items`` (its input items and output items, one row each, indexed by item id). GET, input_items'
  pages, item references and a chain's replay are each a query; nothing is loaded whole at start.
- Retention, by query: a response older than ``max_age`` seconds (30 days, as the API keeps them) is evicted,
  and the oldest ones while the stored bytes pass ``max_bytes``. An evicted response is not found, as a deleted
  one is: a chain that needs it fails with the API's not-found error naming it. Eviction by age runs at open
  and inside writes; every read also leaves out what is past ``max_age`` (a server that only reads, or reads
  between two writes, never serves a response its retention has ended).
- Every call is a transaction in a worker thread (``await``); a write is committed (on disk) before it
  returns. A caller cancelled while it waits (a stream cut short keeping what it sent, within its time bound:
  protocols/base.py) goes on at once; the transaction then commits or not on its own. ``put`` that fails (a
  full disk) raises one of ``db.storage_errors()``: the caller logs it and still answers. A read or a delete
  the database cannot do (a lost database server, a damaged file, a row whose JSON text is damaged: bytes the
  database itself never checks) is a 503 naming the store, never a 500, and the log says why and which id.
- An id with a NUL character is never found (PostgreSQL's text cannot hold one, so no stored row has it): a
  lookup by one answers as for any id not stored, on either database, never with the database's error. An item
  whose own id holds one is stored (listed, replayed) without its id in the index (it cannot be referenced).
- ``memory`` keeps everything in this process only. A directory holds ``state.db``; an older
  ``responses.jsonl`` found there is migrated into it at open (legacy.py).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ApiError
from . import db as dbm
from .db import MEMORY, Database, storage_errors

log = logging.getLogger("tinytitan.store")

FILE_NAME = "responses.jsonl"  # the older store's log, migrated at open
MAX_AGE = 30 * 24 * 3600
MAX_BYTES = 2 * 1024 ** 3
EVICT_BATCH = 256
AGE_CHECK_SECONDS = 60.0


def default_dir() -> Path:
    """Where the older store kept its log (migrated from when the state database is the default one)."""
    return dbm.default_dir() / "responses"


@dataclass
class StoredResponse:
    id: str
    input: list[dict]
    events: list[dict]
    previous_response_id: str | None = None
    created_at: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def response(self) -> dict:
        for ev in reversed(self.events):
            if isinstance(ev, dict) and isinstance(ev.get("response"), dict):
                return ev["response"]
        return {}

    @property
    def output(self) -> list[dict]:
        return list(self.response.get("output") or [])


def _dump(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Page:
    data: list[dict]
    has_more: bool


class CursorNotFound(LookupError):
    def __init__(self, name: str, value: str):
        super().__init__(name)
        self.name, self.value = name, value


class ResponsesStore:
    def __init__(self, database: Database, max_age: float | None = MAX_AGE, max_bytes: int | None = MAX_BYTES):
        self.db = database
        self.max_age = max_age or None
        self.max_bytes = max_bytes or None
        self._aged = 0.0

    @classmethod
    def open(cls, where: str | Path | None, max_age: float | None = MAX_AGE, max_bytes: int | None = MAX_BYTES,
             database: Database | None = None) -> "ResponsesStore":
        """``memory``, a directory, a PostgreSQL URL, or None (the user's state database). ``database``: one
        already open (shared with memory)."""
        store = cls(database or dbm.open_database(where), max_age, max_bytes)
        if where != MEMORY and not dbm.is_url(where):
            from .legacy import migrate_responses

            legacy = Path(where).expanduser() if where else default_dir()
            migrate_responses(store, legacy / FILE_NAME, StoredResponse)
        store.db.run(store._evict_aged)
        log.info("responses store: %s (kept %s%s)", store.db.where,
                 f"{max_age / 86400:g} days" if max_age else "for ever",
                 f", at most {max_bytes // 2 ** 20} MiB" if max_bytes else "")
        return store

    @property
    def persistent(self) -> bool:
        return self.db.persistent

    async def _call(self, fn, key: str, *args, write: bool = False, absent=None):
        """``fn(tx, key, *args)`` in a worker thread; ``absent`` for a key no row can hold (see the rules)."""
        if _unstorable(key):
            return absent
        args = (key, *args)
        try:
            return await self.db.call(fn, *args, write=write, abandonable=True)
        except (*storage_errors(), json.JSONDecodeError) as exc:  # (a row's JSON damaged: see the rules)
            damaged = " (a stored row's JSON is damaged)" if isinstance(exc, json.JSONDecodeError) else ""
            log.error("responses store %s: %s of %r failed: %s%s", self.db.where, fn.__name__.strip("_"), key, exc,
                      damaged)
            raise ApiError("unavailable", f"The response store cannot be {'written' if write else 'read'} now "
                           f"({type(exc).__name__}); try again") from None

    # -- reading ---------------------------------------------------------------------------------------------
    def _cutoff(self) -> int:
        """The oldest ``created_at`` a read may serve (-1: kept for ever)."""
        return -1 if self.max_age is None else int(time.time() - self.max_age)

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self._call(_get, response_id, self._cutoff())

    async def find_item(self, item_id: str) -> dict | None:
        """An input or output item of any stored response, by its id (the newest response's)."""
        return await self._call(_find_item, item_id, self._cutoff())

    async def chain_links(self, response_id: str) -> tuple[list[tuple[list[dict], list[dict]]], str | None] | None:
        """The (input items, output items) of each response of the stored chain ending at ``response_id``, oldest
        response first, and the id of the first response it continues that is not stored (None when it starts
        here). None when ``response_id`` itself is not stored."""
        return await self._call(_chain, response_id, self._cutoff())

    async def input_page(self, response_id: str, limit: int, order: str, after: str | None,
                         before: str | None) -> Page | None:
        """A page of a response's input items (see the Responses API's input_items); None when the response
        is not stored; ``CursorNotFound`` for a cursor that is not one of its items."""
        return await self._call(_input_page, response_id, limit, order, after, before, self._cutoff())

    # -- writing ---------------------------------------------------------------------------------------------
    async def put(self, rec: StoredResponse) -> None:
        await self.db.call(self._put, rec, abandonable=True)

    async def delete(self, response_id: str) -> bool:
        return await self._call(_delete, response_id, self._cutoff(), write=True, absent=False)

    def put_sync(self, rec: StoredResponse) -> None:
        self.db.run(self._put, rec)

    def _put(self, tx, rec: StoredResponse) -> None:
        events = _dump(rec.events)
        inputs = [_dump(item) for item in rec.input]
        outputs = [_dump(item) for item in rec.output]
        extra = _dump(rec.extra)
        size = sum(len(text.encode()) for text in (events, extra, *inputs, *outputs))  # bytes, as the budget says
        _lock_count(tx)  # (first: see _lock_count)
        _delete(tx, rec.id)
        tx.exec("INSERT INTO responses (id, previous_response_id, created_at, stored_at, size, events, extra) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", (rec.id, rec.previous_response_id, int(rec.created_at or time.time()),
                                                 time.time(), size, events, extra))
        for kind, items, bodies in ((0, rec.input, inputs), (1, rec.output, outputs)):
            for pos, (item, body) in enumerate(zip(items, bodies)):
                item_id = item.get("id") if isinstance(item, dict) else None
                if _unstorable(item_id):  # kept, but not by an id the index could hold
                    item_id = None
                tx.exec("INSERT INTO response_items (response_id, kind, position, item_id, body) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (rec.id, kind, pos, item_id if isinstance(item_id, str) else None, body))
        tx.exec("UPDATE meta SET value = value + ? WHERE name = 'response_bytes'", (size,))
        if self.max_bytes is not None:
            self._evict_over(tx, keep=rec.id)
        if self.max_age is not None and time.monotonic() - self._aged > AGE_CHECK_SECONDS:
            self._evict_aged(tx)

    # -- retention -------------------------------------------------------------------------------------------
    def _evict_aged(self, tx) -> int:
        self._aged = time.monotonic()
        if self.max_age is None:
            return 0
        cutoff = self._cutoff()  # (what a read leaves out: the same bound)
        total = 0
        while True:
            ids = [r[0] for r in tx.rows("SELECT id FROM responses WHERE created_at < ? LIMIT ?",
                                         (cutoff, EVICT_BATCH))]
            if not ids:
                break
            total += _delete_many(tx, ids)
        if total:
            log.info("responses store: %d responses older than %d days evicted", total, self.max_age // 86400)
        return total

    def _evict_over(self, tx, keep: str) -> int:
        """The oldest responses (never ``keep``, the one just stored) until the stored bytes fit again."""
        total = 0
        while True:
            excess = tx.row("SELECT value FROM meta WHERE name = 'response_bytes'")[0] - self.max_bytes
            if excess <= 0:
                break
            ids = []
            for rid, size in tx.rows("SELECT id, size FROM responses WHERE id <> ? ORDER BY created_at, stored_at, id "
                                     "LIMIT ?", (keep, EVICT_BATCH)):
                ids.append(rid)
                excess -= size
                if excess <= 0:
                    break
            if not ids:
                break
            total += _delete_many(tx, ids)
        if total:
            log.info("responses store: the %d oldest responses evicted (more than %d MiB stored)", total,
                     self.max_bytes // 2 ** 20)
        return total

    async def count(self) -> int:
        return await self.db.call(lambda tx: tx.row("SELECT count(*) FROM responses")[0], write=False)


# -- the queries (each runs inside one transaction) ---------------------------------------------------------
def _unstorable(key: str | None) -> bool:
    """An id no database row can hold (PostgreSQL's text cannot hold a NUL character): never looked up."""
    return isinstance(key, str) and "\x00" in key


def _get(tx, response_id: str, cutoff: int) -> StoredResponse | None:
    row = tx.row("SELECT previous_response_id, created_at, events, extra FROM responses WHERE id = ? "
                 "AND created_at >= ?", (response_id, cutoff))
    if row is None:
        return None
    inputs = [json.loads(r[0]) for r in tx.rows(
        "SELECT body FROM response_items WHERE response_id = ? AND kind = 0 ORDER BY position", (response_id,))]
    return StoredResponse(response_id, inputs, json.loads(row[2]), row[0], row[1], json.loads(row[3]))


def _find_item(tx, item_id: str, cutoff: int) -> dict | None:
    row = tx.row("SELECT i.body FROM response_items i JOIN responses r ON r.id = i.response_id WHERE i.item_id = ? "
                 "AND r.created_at >= ? ORDER BY r.created_at DESC, r.stored_at DESC, i.kind DESC LIMIT 1",
                 (item_id, cutoff))
    return json.loads(row[0]) if row else None


def _chain(tx, response_id: str, cutoff: int) -> tuple[list[tuple[list[dict], list[dict]]], str | None] | None:
    """Walked link by link on the primary key (a recursive query is planned badly by PostgreSQL on a large
    table), then the items of every link read in a few queries."""
    links: list[str] = []
    missing, rid = None, response_id
    while rid is not None and rid not in links:  # (a cycle is never written by this server: it stops there)
        row = tx.row("SELECT previous_response_id FROM responses WHERE id = ? AND created_at >= ?", (rid, cutoff))
        if row is None:
            if not links:
                return None
            missing = rid
            break
        links.append(rid)
        rid = row[0]
    depth = {rid: i for i, rid in enumerate(links)}
    found = []
    for lo in range(0, len(links), 500):
        part = links[lo:lo + 500]
        found += tx.rows(f"SELECT response_id, kind, position, body FROM response_items WHERE response_id IN "
                         f"({', '.join('?' * len(part))})", part)
    found.sort(key=lambda r: (-depth[r[0]], r[1], r[2]))  # the oldest response first; its input, then output
    parts: dict[str, tuple[list[dict], list[dict]]] = {rid: ([], []) for rid in reversed(links)}
    for rid, kind, _, body in found:
        parts[rid][kind].append(json.loads(body))
    return list(parts.values()), missing


def _input_page(tx, response_id: str, limit: int, order: str, after: str | None, before: str | None,
                cutoff: int) -> Page | None:
    if tx.row("SELECT 1 FROM responses WHERE id = ? AND created_at >= ?", (response_id, cutoff)) is None:
        return None

    def position(name: str, value: str | None) -> int | None:
        if value is None:
            return None
        if _unstorable(value):  # (an item stored without its id in the index: a page's last_id may be it)
            row = next(((p,) for p, body in tx.rows(
                "SELECT position, body FROM response_items WHERE response_id = ? AND kind = 0 AND item_id IS NULL "
                "ORDER BY position", (response_id,)) if json.loads(body).get("id") == value), None)
        else:
            row = tx.row("SELECT min(position) FROM response_items WHERE response_id = ? AND kind = 0 "
                         "AND item_id = ?", (response_id, value))
        if row is None or row[0] is None:
            raise CursorNotFound(name, value)
        return row[0]

    a, b = position("after", after), position("before", before)
    asc = order == "asc"
    where, params = ["response_id = ?", "kind = 0"], [response_id]
    # 'after' and 'before' are in the page's order: in desc order 'after' means a smaller position
    for pos, later in ((a, True), (b, False)):
        if pos is not None:
            where.append("position > ?" if later == asc else "position < ?")
            params.append(pos)
    direction = "ASC" if asc else "DESC"
    if b is not None and a is None:  # only 'before': the page right before it (read backwards, then turned)
        direction = "DESC" if asc else "ASC"
    rows = tx.rows(f"SELECT body FROM response_items WHERE {' AND '.join(where)} ORDER BY position {direction} "
                   "LIMIT ?", (*params, limit + 1))
    data = [json.loads(r[0]) for r in rows[:limit]]
    if b is not None and a is None:
        data.reverse()
    return Page(data, len(rows) > limit)


def _delete(tx, response_id: str, cutoff: int = -1) -> bool:
    """Deleted, and found: one past its retention is deleted but was not found, as for a read."""
    found = tx.row("SELECT 1 FROM responses WHERE id = ? AND created_at >= ?", (response_id, cutoff)) is not None
    return _delete_many(tx, [response_id]) > 0 and found


def _lock_count(tx) -> None:
    """Every write takes the byte count's row before any response's (PostgreSQL locks rows; a SQLite write holds
    the whole database): a DELETE holding a response while it waited for the count, and a write holding the count
    while it evicted that response, deadlocked, and PostgreSQL cancelled one of them."""
    if tx.dialect == "postgresql":
        tx.rows("SELECT value FROM meta WHERE name = 'response_bytes' FOR UPDATE")


def _delete_many(tx, ids: list[str]) -> int:
    """Deletes what is still there of ``ids``; the bytes counted off are those of the rows this transaction
    deleted (``RETURNING``): another server deleting the same ones at once (eviction, a retried DELETE) waits
    on them, then deletes none, counts off nothing, and reports none deleted."""
    _lock_count(tx)
    marks = ", ".join("?" * len(ids))
    sizes = tx.rows(f"DELETE FROM responses WHERE id IN ({marks}) RETURNING size", ids)
    if not sizes:
        return 0
    tx.exec(f"DELETE FROM response_items WHERE response_id IN ({marks})", ids)
    tx.exec("UPDATE meta SET value = value - ? WHERE name = 'response_bytes'", (sum(r[0] for r in sizes),))
    return len(sizes)
