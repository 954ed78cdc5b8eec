"""One workspace's memory: its rows in the state database (tinytitan/store/db.py, tables in schema.py).

Rules:
- A record is one row of ``memory_records`` under the workspace's scope (``namespace/user/workspace``); a
  ``set`` that rewrites a key keeps its creation time and, unless given, its importance, confidence and tags.
  ``append`` adds a line (creating the record when absent). Each call is one transaction: a write that fails
  (a full or read-only disk, a lost database server) raises ``WriteFailed`` and nothing changed, so a caller
  never reports a lost write as saved.
- Search is the database's full-text index, ranked: SQLite's FTS5 (bm25, a hit in the key weighing 10, in a
  tag 5, in the value 1), PostgreSQL's tsvector (ts_rank, key words weighted A, tags B, the value D). Every
  query word is a prefix; records matching more, and better, come first, then the more important, then the
  older fact. Filters (prefix, tags, least importance) are part of the same query.
- Reading a workspace creates nothing. Its first write registers it in ``memory_workspaces``; past
  ``max_workspaces`` registered workspaces a new one's write is refused, saying so (``WorkspacesFull``), and
  the workspaces that have memory keep it. New workspaces register one at a time (PostgreSQL: an advisory lock;
  SQLite writes one transaction at a time), so servers sharing the database never pass the cap together.
- A listing (``list``, ``ranked`` with ``brief``) reads of each value only what its summary needs, and the
  memory tools' ``memory_list`` reads only the records it shows: a large memory is never read whole for one.
- The calls block: the server runs them in worker threads (``Database.call``), never on the event loop.
"""

from __future__ import annotations

import errno
import logging
import re
import time

from ..store.db import Database, storage_errors
from .keys import Refused, parse_key, parse_prefix, under
from .records import Record, WriteFailed, check_confidence, check_importance, check_tags, check_value

log = logging.getLogger("tinytitan.memory")

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script, as the full-text indexes split words
_COLUMNS = "key, value, importance, confidence, tags, created, updated"
_BLANK = " \t\r\n\f\v"
_REGISTERING = 7261637  # PostgreSQL's advisory lock for registering a workspace (schema.py's creator: 7261636)
HEAD_CHARS = 1024  # what a listing reads of a value: its summary (at most 200 characters) lies within


class WorkspacesFull(WriteFailed):
    pass


def words_of(key: str) -> str:
    """A key as words for the index: 'build/command-line' is 'build command line'."""
    return " ".join(_WORD.findall(key.lower()))


def tags_text(tags) -> str:
    return " " + " ".join(tags) + " " if tags else ""


def _record(row) -> Record:
    key, value, importance, confidence, tags, created, updated = row
    return Record(key, value, importance, confidence, tuple(tags.split()), created, updated)


class Workspace:
    def __init__(self, db: Database, scope: str, path: str | None = None, max_workspaces: int | None = None,
                 why_not: str | None = None):
        self.db = db
        self.scope = scope
        self.path = path
        self.max_workspaces = max_workspaces
        self.persistent = db.persistent and why_not is None
        self.why_not = why_not if why_not else None if db.persistent else "memory only: no database file"

    # -- reading -------------------------------------------------------------------------------------------
    def get(self, key: str) -> Record | None:
        key = parse_key(key)
        return self.db.run(self._get, key, write=False)

    def _get(self, tx, key: str, lock: bool = False) -> Record | None:
        row = tx.row(f"SELECT {_COLUMNS} FROM memory_records WHERE scope = ? AND key = ?"
                     + (" FOR UPDATE" if lock and tx.dialect == "postgresql" else ""), (self.scope, key))
        return _record(row) if row else None

    def list(self, prefix: str = "", limit: int | None = None, brief: bool = False) -> list[Record]:
        """The records under ``prefix``, by key; at most ``limit``; ``brief``: see ``_select``."""
        prefix = parse_prefix(prefix)
        sql, params = self._select(brief, "substr(key, 1, ?) = ? ORDER BY key", len(prefix), prefix)
        if limit is not None:
            sql, params = sql + " LIMIT ?", (*params, limit)
        return [_record(r) for r in self.db.run(lambda tx: tx.rows(sql, params), write=False)]

    def ranked(self, limit: int | None = None, brief: bool = False) -> list[Record]:
        """Most important first; among equals, the older fact first."""
        sql, params = self._select(brief, "1 = 1 ORDER BY importance DESC, created, key")
        if limit is not None:
            sql, params = sql + " LIMIT ?", (*params, limit)
        return [_record(r) for r in self.db.run(lambda tx: tx.rows(sql, params), write=False)]

    def _select(self, brief: bool, where: str, *params) -> tuple[str, tuple]:
        """A query of this workspace's records. ``brief``: each value only as far as its summary needs (its first
        ``HEAD_CHARS`` characters past leading blank space), so that a listing never reads whole values: a
        workspace may hold thousands of records of up to 64 KiB each."""
        if not brief:
            return f"SELECT {_COLUMNS} FROM memory_records WHERE scope = ? AND {where}", (self.scope, *params)
        columns = _COLUMNS.replace("value", "substr(ltrim(value, ?), 1, ?)")
        return (f"SELECT {columns} FROM memory_records WHERE scope = ? AND {where}",
                (_BLANK, HEAD_CHARS, self.scope, *params))

    def count(self, prefix: str = "") -> int:
        prefix = parse_prefix(prefix)
        return self.db.run(lambda tx: tx.row("SELECT count(*) FROM memory_records WHERE scope = ? AND "
                                             "substr(key, 1, ?) = ?", (self.scope, len(prefix), prefix))[0],
                           write=False)

    def search(self, text: str = "", prefix: str = "", tags: tuple[str, ...] = (), min_importance: int = 1,
               limit: int = 10) -> list[Record]:
        prefix = parse_prefix(prefix)
        words = _WORD.findall((text or "").lower())
        return [r for r in self.db.run(self._search, words, prefix, tuple(tags), min_importance, limit, write=False)
                if under(r.key, prefix) and set(tags) <= set(r.tags)]

    def _search(self, tx, words, prefix, tags, min_importance, limit) -> list[Record]:
        cols = ", ".join(f"r.{c}" for c in _COLUMNS.split(", "))
        where = ["r.scope = ?", "r.importance >= ?", "substr(r.key, 1, ?) = ?"]
        params: list = [self.scope, min_importance, len(prefix), prefix]
        find = "instr(r.tags, ?) > 0" if tx.dialect == "sqlite" else "strpos(r.tags, ?) > 0"
        for tag in tags:
            where.append(find)
            params.append(f" {tag} ")
        tail = "r.importance DESC, r.created, r.key LIMIT ?"
        if not words:
            return [_record(r) for r in tx.rows(
                f"SELECT {cols} FROM memory_records r WHERE {' AND '.join(where)} ORDER BY {tail}", (*params, limit))]
        if tx.dialect == "sqlite":
            match = " OR ".join(f'"{w}"*' for w in words)
            sql = (f"SELECT {cols} FROM memory_fts JOIN memory_records r ON r.id = memory_fts.rowid "
                   f"WHERE memory_fts MATCH ? AND {' AND '.join(where)} "
                   f"ORDER BY bm25(memory_fts, 10.0, 5.0, 1.0), {tail}")
        else:
            match = " | ".join(f"{w}:*" for w in words)
            sql = (f"SELECT {cols} FROM memory_records r, to_tsquery('simple', ?) q WHERE r.tsv @@ q AND "
                   f"{' AND '.join(where)} ORDER BY ts_rank('{{0.1, 0.2, 0.5, 1.0}}', r.tsv, q) DESC, {tail}")
        return [_record(r) for r in tx.rows(sql, (match, *params, limit))]

    # -- writing -------------------------------------------------------------------------------------------
    def set(self, key: str, value: str, importance: int | None = None, confidence: float | None = None,
            tags: list[str] | None = None) -> Record:
        key, value = parse_key(key), check_value(value)
        importance = check_importance(importance) if importance is not None else None
        confidence = check_confidence(confidence)
        tag_names = check_tags(tags) if tags is not None else None

        def write(tx, old: Record | None) -> Record:
            now = time.time()
            return Record(key, value, importance if importance is not None else (old.importance if old else 3),
                          confidence if confidence is not None else (old.confidence if old else None),
                          tag_names if tag_names is not None else (old.tags if old else ()),
                          old.created if old else now, now)

        rec = self._write("set", lambda tx: self._change(tx, key, write))
        log.info("memory set: key %d chars, value %d bytes", len(key), len(value.encode("utf-8", "replace")))
        return rec

    def append(self, key: str, text: str) -> Record:
        key = parse_key(key)
        if not isinstance(text, str):
            raise Refused("text must be a string")

        def write(tx, old: Record | None) -> Record:
            now = time.time()
            if old is None:
                return Record(key, check_value(text), created=now, updated=now)
            old.value, old.updated = check_value((old.value + "\n" if old.value else "") + text), now
            return old

        rec = self._write("append", lambda tx: self._change(tx, key, write))
        log.info("memory append: key %d chars, text %d bytes", len(key), len(text.encode("utf-8", "replace")))
        return rec

    def delete(self, key: str) -> bool:
        key = parse_key(key)
        gone = self._write("delete", lambda tx: tx.exec("DELETE FROM memory_records WHERE scope = ? AND key = ?",
                                                        (self.scope, key)) > 0)
        if gone:
            log.info("memory delete: key %d chars", len(key))
        return gone

    def _change(self, tx, key: str, make) -> Record:
        """The record ``make(tx, old)`` makes of the one under ``key`` (None: none yet), stored. A new key
        written by another server at the same moment (PostgreSQL: no row to lock yet) is read again and
        changed in turn, as if it had come first."""
        for _ in range(2):
            old = self._get(tx, key, lock=True)
            rec = make(tx, old)
            if self._store(tx, rec, old is not None):
                return rec
        raise WriteFailed(errno.EAGAIN, f"the memory record {key!r} changed while it was written; try again")

    def _store(self, tx, rec: Record, exists: bool) -> bool:
        """Whether it was stored (False: a new key another writer inserted first)."""
        if exists:
            tx.exec("UPDATE memory_records SET value = ?, importance = ?, confidence = ?, tags = ?, updated = ? "
                    "WHERE scope = ? AND key = ?", (rec.value, rec.importance, rec.confidence, tags_text(rec.tags),
                                                    rec.updated, self.scope, rec.key))
            return True
        self._register(tx)
        return tx.exec("INSERT INTO memory_records (scope, key, words, value, importance, confidence, tags, created, "
                       "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, key) DO NOTHING",
                       (self.scope, rec.key, words_of(rec.key), rec.value, rec.importance, rec.confidence,
                        tags_text(rec.tags), rec.created, rec.updated)) > 0

    def _register(self, tx) -> None:
        if tx.row("SELECT 1 FROM memory_workspaces WHERE scope = ?", (self.scope,)) is not None:
            return
        if self.max_workspaces:
            if tx.dialect == "postgresql":  # one registration at a time: two that counted at once both got in
                tx.exec("SELECT pg_advisory_xact_lock(?)", (_REGISTERING,))
            n = tx.row("SELECT count(*) FROM memory_workspaces")[0]
            if n >= self.max_workspaces:
                raise WorkspacesFull(errno.EDQUOT, f"memory is kept for at most {self.max_workspaces} workspaces "
                                     "(--memory-max-workspaces) and every one has memory; delete one with "
                                     "'tinytitan memory forget' or raise the cap")
        tx.exec("INSERT INTO memory_workspaces (scope, path, created) VALUES (?, ?, ?) ON CONFLICT (scope) DO NOTHING",
                (self.scope, self.path, time.time()))

    def _write(self, op: str, fn):
        try:
            return self.db.run(fn)
        except WorkspacesFull as exc:
            log.warning("memory %s refused for a new workspace: %s", op, exc.strerror)
            raise
        except storage_errors() as exc:
            log.error("memory %s could not be written to %s: %s", op, self.db.where, exc)
            raise WriteFailed(errno.EIO, f"the memory database could not be written ({exc})") from None
