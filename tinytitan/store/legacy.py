"""The older Responses store's log (``responses.jsonl``), migrated into the state database at open.

Rules:
- The log is replayed as the older store did (``put`` / ``delete`` records, its newest 256 kept; a torn last line
  or an unreadable one is skipped with a warning) and every live response is written to the database, keeping
  its id, chain and creation time. A record whose fields are not what the store writes (JSON edited or damaged
  into another shape) is skipped with a warning too: the write would fail, and with it every start. Writing is
  idempotent: a migration cut short is simply done again at the next start.
- Verified before anything moves: every migrated id is read back from the database. Then the log is renamed
  ``responses.jsonl.migrated`` (kept beside the database as a backup, never deleted by the server). When the
  check fails the log stays where it is, the error says so, and the next start tries again. A log that moved but
  cannot be renamed (a directory that cannot be written) is noted in ``meta`` until it is: never moved again,
  which would bring back what was deleted since, nor a server that cannot start. The note names that very file
  (its machine, path, size and time): another machine's log at the same path on a shared database, or another log
  put there later, is moved as any.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections import OrderedDict
from pathlib import Path
from typing import Callable

log = logging.getLogger("tinytitan.store")

BACKUP_SUFFIX = ".migrated"
OLDER_KEEP = 256  # the older store served its newest 256 responses (no flag changed it): its log can hold more


def replay_lines(path: Path, apply: Callable[[dict], None], logger: logging.Logger, what: str) -> None:
    """Each JSON line of ``path`` through ``apply``, in order, as the older stores replayed their logs: a line
    that cannot be read or applied — a torn last one (a crash mid-write), or one in the middle — is skipped with
    a warning (its type, never its contents), and everything else is kept."""
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        try:
            if nl < 0:
                raise ValueError("no line end")
            apply(json.loads(data[pos:end].decode("utf-8")))
        except (ValueError, UnicodeDecodeError, TypeError, KeyError, AttributeError) as exc:
            where = "a torn last record" if end >= len(data) else f"an unreadable record at byte {pos}"
            logger.warning("%s %s: skipped %s (%s)", what, path, where, type(exc).__name__)
        pos = end


def read_log(path: Path) -> "OrderedDict[str, dict]":
    records: OrderedDict[str, dict] = OrderedDict()

    def apply(record: dict) -> None:
        op = record.get("op")
        if op == "put":
            body = {k: v for k, v in record.items() if k != "op"}
            records.pop(body["id"], None)
            records[body["id"]] = body
            while len(records) > OLDER_KEEP:  # evicted there, as its own replay did: not brought back
                records.popitem(last=False)
        elif op == "delete":
            records.pop(record["id"], None)
        else:
            raise ValueError(f"unknown record op {op!r}")

    replay_lines(path, apply, log, "responses log")
    return records


def _writable(rec):
    """``rec`` (a StoredResponse) where its fields are what the store writes, else a TypeError, ValueError or
    OverflowError: a record that is JSON but was edited or damaged into another shape (``events: null``, a
    time of ``"soon"``), which the database write would fail on, and every start with it."""
    if not isinstance(rec.id, str) or not all(isinstance(v, list) for v in (rec.input, rec.events, rec.output)):
        raise TypeError("its id is not a string, or its input, events or output not a list")
    if not -2 ** 63 <= int(rec.created_at or 0) < 2 ** 63:  # (int: a ValueError for a time that is no number)
        raise OverflowError(f"its creation time {rec.created_at!r} is past what the database holds")
    return rec


def migrate_responses(store, path: Path, record: Callable[..., object]) -> int:
    """Move ``path`` (an older store's log) into ``store``'s database, each response made a ``record`` (the
    store's StoredResponse); the number of responses migrated."""
    if not path.is_file():
        return 0
    st = path.stat()  # (meta: this very log moved, not renamed yet: see the rules)
    moved = f"moved {socket.gethostname()}:{path.resolve()} {st.st_size} {st.st_mtime_ns}"
    if store.db.run(lambda tx: tx.row("SELECT 1 FROM meta WHERE name = ?", (moved,)), write=False) is not None:
        _renamed(store, path, moved)
        return 0
    records = read_log(path)
    puts = []
    for body in records.values():
        try:
            puts.append(_writable(record(**body)))
        except (TypeError, ValueError, OverflowError) as exc:
            log.warning("%s: a response that cannot be read skipped (%s)", path, exc)

    def write(tx):
        for rec in puts:
            store._put(tx, rec)  # the whole log in one transaction: all of it or none

    saved = store.max_bytes, store.max_age
    store.max_bytes = store.max_age = None  # retention applies after the move (and its check), not to the move
    try:
        store.db.run(write)
    finally:
        store.max_bytes, store.max_age = saved

    def check(tx):
        return [rec.id for rec in puts if tx.row("SELECT 1 FROM responses WHERE id = ?", (rec.id,)) is None]

    missing = store.db.run(check, write=False)
    if missing:
        log.error("%s: migration not verified (%d of %d responses missing from %s); the log is left in place and "
                  "the migration is tried again at the next start", path, len(missing), len(puts), store.db.where)
        return 0
    store.db.run(lambda tx: tx.exec("INSERT INTO meta (name, value) VALUES (?, 1) ON CONFLICT (name) DO NOTHING",
                                    (moved,)))
    if _renamed(store, path, moved):
        log.warning("responses store: %d responses migrated from %s into %s (verified); the old log is kept as %s",
                    len(puts), path, store.db.where, path.with_name(path.name + BACKUP_SUFFIX))
    return len(puts)


def _renamed(store, path: Path, moved: str) -> bool:
    """The log renamed as its backup (or by another server, migrating it at the same time), and the note that it
    moved (``moved``) cleared; False where it cannot be renamed (logged, the note kept)."""
    try:
        os.replace(path, path.with_name(path.name + BACKUP_SUFFIX))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("responses log %s: moved into the database, but it cannot be renamed %s%s (%s): it is not read "
                  "again; rename or remove it", path, path.name, BACKUP_SUFFIX, exc)
        return False
    store.db.run(lambda tx: tx.exec("DELETE FROM meta WHERE name = ?", (moved,)))
    return True
