"""The state database: one small interface, three implementations (a SQLite file, SQLite in this process's
memory, PostgreSQL). The stores (responses_store.py, memory/workspace.py) write portable SQL against it and
never learn which one they have.

Rules:
- ``run(fn, *args)`` calls ``fn(tx, *args)`` inside one transaction and returns what it returns: committed
  when ``fn`` returns, rolled back when it raises. ``tx.rows(sql, params)`` / ``tx.row`` / ``tx.exec`` take
  ``?`` placeholders on every implementation; ``tx.dialect`` ("sqlite" or "postgresql") is for the few
  statements that differ (full-text search, locking a row).
- ``run`` blocks: from the trio event loop call ``await db.call(fn, *args)``, which runs it in a worker
  thread (at most ``THREADS`` at once); ``abandonable`` lets a cancelled caller go on without waiting for it.
  Each thread has its own connection, closed once the thread is gone (SQLite's in-memory database has one,
  behind a lock).
- SQLite: WAL, ``synchronous=FULL`` (a commit is on disk before ``run`` returns, so an answered write survives
  ``kill -9`` and power loss), a busy timeout so several processes share one file, writes begin IMMEDIATE.
- Every statement is bounded by ``STATEMENT_SECONDS``: SQLite's busy timeout (a lock another process holds);
  PostgreSQL's ``statement_timeout`` (a lock, a server that stalls), set in each transaction (``SET LOCAL``:
  never a startup option, which PgBouncer and the poolers built on it refuse, and which would replace
  PGOPTIONS), with TCP keepalives and ``tcp_user_timeout`` for a server machine gone silent, unless the URL
  (or, for the timeout, PGOPTIONS) sets them itself. Expired, the
  statement raises one of ``storage_errors()`` (PostgreSQL's QueryCanceled is an OperationalError): a read is
  the same 503 naming the store that a lost server gives, never a request held for as long as TCP allows.
- A SQLite file that is not a database (or is malformed) is moved aside at open, with its WAL, as
  ``<name>.corrupt-<time>``, and the error says where; a new file is started. Nothing is ever emptied in place.
  Where another server on the same file set it aside while this one checked it, the new file in its place is
  this server's too: never moved aside in turn (the servers would go on in two files, and a move in the same
  second would go over the one copy of the damaged file) — unless it is damaged too (or only looked new).
  At open the file is read through by ``PRAGMA quick_check`` (damage past the first pages, which opening alone
  never reads, would otherwise be found by the first request that reads there: a 503 mid-session), for at most
  ``CHECK_SECONDS``: what a bigger file holds past that is found when it is read, as before.
- ``storage_errors()``: what a failed write raises (a full disk, a read-only file, a lost server). Callers log it
  and go on; they never report such a write as saved.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit, urlunsplit

import trio

from . import schema

log = logging.getLogger("tinytitan.store")

FILE_NAME = "state.db"
THREADS = 8  # worker threads (so connections) a database is used from at once, per process
STATEMENT_SECONDS = 30.0  # the most one statement may wait (a lock, a stalled server) before it fails
CHECK_SECONDS = 2.0  # the most a SQLite file's check at open takes (a file of some hundreds of MB is read whole)
T = TypeVar("T")

# what a failed read or write raises (see the rules), SQLite's; psycopg's join them once a PostgreSQL database has
# imported it (``_psycopg``): ``except storage_errors()`` reads them when the exception is matched
_SQLITE_ERRORS: tuple[type[BaseException], ...] = (OSError, sqlite3.OperationalError, sqlite3.DatabaseError)
_pg_errors: tuple[type[BaseException], ...] = ()


def storage_errors() -> tuple[type[BaseException], ...]:
    """What a failed write (or read) raises (see the rules), whichever database this process opened: psycopg's
    errors from the moment a PostgreSQL database imports it (none can be raised before)."""
    return _SQLITE_ERRORS + _pg_errors


def _psycopg():
    """psycopg, imported when a PostgreSQL database opens: nothing else needs it, and its import was about a tenth
    of a second of every server's start."""
    global _pg_errors
    try:
        import psycopg
    except ImportError:  # (the package is a dependency: a broken install says so here)
        raise SystemExit("--state postgresql://… needs the psycopg package: pip install 'psycopg[binary]'") from None
    _pg_errors = (psycopg.OperationalError, psycopg.InterfaceError)
    return psycopg


class StateUnavailable(RuntimeError):
    """The state database cannot be opened (a directory that cannot be written, a server that cannot be
    reached, a schema newer than this tinytitan): the message says which and why."""


def _close(conn) -> bool:
    try:
        conn.close()
    except Exception:
        pass
    return False


class Tx:
    """One transaction's statements, with ``?`` placeholders."""

    def __init__(self, cur, dialect: str):
        self.cur = cur
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def exec(self, sql: str, params: tuple | list = ()) -> int:
        self.cur.execute(self._sql(sql), tuple(params))
        return self.cur.rowcount

    def rows(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        self.cur.execute(self._sql(sql), tuple(params))
        return list(self.cur.fetchall())

    def row(self, sql: str, params: tuple | list = ()) -> tuple | None:
        self.cur.execute(self._sql(sql), tuple(params))
        return self.cur.fetchone()


class Database:
    """The interface (see the rules above)."""

    dialect = "sqlite"
    persistent = True
    where = ""

    def __init__(self):
        self._local = threading.local()  # this thread's connection
        self._all: list[tuple[threading.Thread, Any]] = []  # every thread's, to close
        self._guard = threading.Lock()

    def _track(self, conn) -> None:
        with self._guard:  # the connections of threads that are gone are closed
            self._all = [(t, c) for t, c in self._all if t.is_alive() or _close(c)]
            self._all.append((threading.current_thread(), conn))

    def run(self, fn: Callable[..., T], *args: Any, write: bool = True) -> T:
        raise NotImplementedError

    _limiter: trio.CapacityLimiter | None = None

    async def call(self, fn: Callable[..., T], *args: Any, write: bool = True, abandonable: bool = False) -> T:
        """``abandonable``: a cancelled caller goes on at once, the thread left to finish (or not) on its own;
        else the caller waits for it, however long the database takes."""
        if self._limiter is None:  # a bounded number of connections at once (each thread has its own)
            self._limiter = trio.CapacityLimiter(THREADS)
        return await trio.to_thread.run_sync(partial(self.run, fn, *args, write=write), limiter=self._limiter,
                                             abandon_on_cancel=abandonable)

    def close(self) -> None:
        with self._guard:
            for _, conn in self._all:
                _close(conn)
            self._all.clear()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.where}>"


# -- SQLite ------------------------------------------------------------------------------------------------
def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` names now (its device and inode), None where none does."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _corrupt(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError) and (
        "not a database" in text or "malformed" in text or "corrupt" in text)


class SqliteDatabase(Database):
    def __init__(self, path: Path | None, busy_timeout: float | None = None):
        """``path``: the file; None: a database in this process's memory (gone when it ends)."""
        super().__init__()
        self.path = path
        self.busy_timeout = STATEMENT_SECONDS if busy_timeout is None else busy_timeout
        self.persistent = path is not None
        self.where = str(path) if path is not None else "memory"
        self._lock = threading.Lock() if path is None else None
        self._shared: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._found = _identity(path)  # the file checked (``_set_aside``: still the one at ``path``?)
            try:
                self._check()
                self.run(schema.create)
            except sqlite3.DatabaseError as exc:
                if not _corrupt(exc):
                    raise
                self._set_aside(exc)
                try:
                    self._check()  # (a new file: its check is quick)
                    self.run(schema.create)
                except sqlite3.DatabaseError as again:  # the file taken for another server's new one is damaged too
                    if not _corrupt(again):
                        raise
                    self._set_aside(again, looked=False)
                    self.run(schema.create)
            for suffix in ("", "-wal", "-shm"):  # the owner's only
                try:
                    os.chmod(str(path) + suffix, 0o600)
                except OSError:
                    pass
        else:
            self._shared = self._connect(":memory:", check_same_thread=False)
            self.run(schema.create)

    def _check(self) -> None:
        """``PRAGMA quick_check`` of the file, for at most ``CHECK_SECONDS``; the damage it finds raised as SQLite's
        own ``malformed`` (DatabaseError), which sets the file aside (see the rules)."""
        conn = self._conn()
        deadline = time.monotonic() + CHECK_SECONDS
        # SQLite calls no progress handler while it walks a b-tree (most of the check), but stops at an interrupt
        timer = threading.Timer(CHECK_SECONDS, conn.interrupt)
        timer.daemon = True
        conn.set_progress_handler(lambda: time.monotonic() > deadline, 100)
        timer.start()
        try:
            found = [row[0] for row in conn.execute("PRAGMA quick_check(5)").fetchall()]
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
            size = self.path.stat().st_size if self.path is not None and self.path.exists() else 0
            log.info("state database %s (%.0f MB): checked for %g s at start, not to its end; damage further in "
                     "is found when it is read", self.path, size / 1e6, CHECK_SECONDS)
            return
        except sqlite3.DatabaseError as exc:  # a page it cannot even parse
            raise sqlite3.DatabaseError(f"{exc}, found by PRAGMA quick_check at start") from None
        finally:
            timer.cancel()
            timer.join()
            conn.set_progress_handler(None, 0)
        if found != ["ok"]:
            lines = [line for text in found for line in text.splitlines() if not line.startswith("***")]
            raise sqlite3.DatabaseError(f"database disk image is malformed, found by PRAGMA quick_check at start: "
                                        f"{'; '.join(lines[:3])}{' …' if len(lines) > 3 else ''}")

    def _set_aside(self, exc: BaseException, looked: bool = True) -> None:
        assert self.path is not None
        self.close()
        if looked and _identity(self.path) != self._found:  # set aside by another server while this one checked it
            log.warning("state database %s: found corrupt (%s), and already set aside by another server: the new "
                        "database in its place is used", self.path, exc)
            return
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                os.replace(src, Path(str(aside) + suffix))
        log.error("state database %s is corrupt (%s): moved aside to %s, untouched; a new database is started. "
                  "Recover from the copy with `sqlite3 %s .recover | sqlite3 %s.recovered` (then, with the server "
                  "stopped, put that file in place of %s)", self.path, exc, aside, aside, aside, self.path.name)
        self.set_aside = aside

    def _connect(self, target: str, **kw) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=self.busy_timeout, isolation_level=None, **kw)
        if target != ":memory:":
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                log.warning("state database %s: journal mode %s (WAL refused)", target, mode)
            conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        self._track(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._shared is not None:
            return self._shared
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # used by this thread only; closed by whoever closes the database
            conn = self._local.conn = self._connect(str(self.path), check_same_thread=False)
        return conn

    def run(self, fn, *args, write: bool = True):
        if self._lock is not None:
            with self._lock:
                return self._run(fn, args, write)
        return self._run(fn, args, write)

    def _run(self, fn, args, write):
        conn = self._conn()
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            out = fn(Tx(cur, "sqlite"), *args)
            conn.commit()  # (inside: a commit that fails, a full disk or a deferred constraint, is rolled back too,
            # or the transaction stays open on this thread's connection and every later call there fails)
        except BaseException:
            try:
                conn.rollback()
            except sqlite3.Error:
                pass
            raise
        return out

    def close(self) -> None:
        super().close()
        self._shared = None


# -- PostgreSQL --------------------------------------------------------------------------------------------
def redact(url: str) -> str:
    """The URL without its password (for logs): in its user part, or as libpq's ``?password=`` parameter."""
    parts = urlsplit(url)
    query = "&".join(f"{item.split('=', 1)[0]}=***" if item.split("=", 1)[0].lower() == "password" else item
                     for item in parts.query.split("&")) if parts.query else ""
    if parts.password is None and query == parts.query:
        return url  # (as given: a round trip would drop an empty host's "//")
    if parts.password is not None:
        host = parts.hostname or ""
        parts = parts._replace(netloc=f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else ""))
    return urlunsplit(parts._replace(query=query))


class PostgresDatabase(Database):
    dialect = "postgresql"

    def __init__(self, url: str, connect_timeout: float = 10.0, statement_timeout: float | None = None):
        self.pg = _psycopg()
        super().__init__()
        self.url = url
        self.connect_timeout = connect_timeout
        self.where = redact(url)
        seconds = STATEMENT_SECONDS if statement_timeout is None else statement_timeout
        self.params, self.bound_ms = _bounds(url, seconds)
        self.run(schema.create)

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = self._local.conn = self.pg.connect(self.url, connect_timeout=int(self.connect_timeout),
                                                      **self.params)
            self._track(conn)
        return conn

    def run(self, fn, *args, write: bool = True):
        conn = self._conn()
        with conn.transaction():
            with conn.cursor() as cur:
                if self.bound_ms is not None:  # (this transaction's alone, through any pooler: see the rules)
                    cur.execute(f"SET LOCAL statement_timeout = {self.bound_ms}")
                return fn(Tx(cur, "postgresql"), *args)


def _bounds(url: str, seconds: float) -> tuple[dict, int | None]:
    """(the connection parameters that bound a silent server to ``seconds``, the ``statement_timeout`` in ms each
    transaction sets; None where the URL's options, or PGOPTIONS, set one themselves): see the rules. What the
    URL sets itself is left as it says."""
    given = _psycopg().conninfo.conninfo_to_dict(url)
    ms = max(1, int(seconds * 1000))
    out: dict = {}
    for name, value in (("keepalives", 1), ("keepalives_idle", 10), ("keepalives_interval", 5),
                        ("keepalives_count", 3), ("tcp_user_timeout", ms)):
        if name not in given:
            out[name] = value
    own = given.get("options") or os.environ.get("PGOPTIONS") or ""  # (libpq reads the second without the first)
    return out, (None if "statement_timeout" in own else ms)


# -- choosing one ------------------------------------------------------------------------------------------
MEMORY = "memory"
ENV = "TINYTITAN_STATE"


def default_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tinytitan"


def is_url(where: str | Path | None) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


def open_database(where: str | Path | None) -> Database:
    """``memory``, a PostgreSQL URL, a directory (its ``state.db``) or a ``.db`` file; None: the user's state
    directory."""
    if where == MEMORY:
        return SqliteDatabase(None)
    if isinstance(where, str) and "://" in where and not is_url(where):  # (else a directory named 'mysql:')
        raise StateUnavailable(f"the state database {redact(where)} cannot be opened: only postgresql:// (or "
                               "postgres://) URLs, a directory or a .db file name a state database")
    try:
        if is_url(where):
            return PostgresDatabase(str(where))
        return SqliteDatabase(db_path(where))
    except (*storage_errors(), RuntimeError) as exc:
        place = redact(str(where)) if is_url(where) else str(db_path(where))
        raise StateUnavailable(f"the state database {place} cannot be opened: {exc}") from exc


def db_path(where: str | Path | None) -> Path:
    path = Path(where).expanduser() if where else default_dir()
    return path if path.suffix in (".db", ".sqlite", ".sqlite3") else path / FILE_NAME
