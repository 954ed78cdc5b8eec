"""Older memory journals (``<dir>/<namespace>/<user>/<workspace>/journal.ndjson``), migrated into the state
database when memory opens.

Rules:
- A journal is replayed as the older server did (``workspace``, ``set``, ``append``, ``delete`` records; a set
  that rewrites a key keeps its creation time; a torn or unreadable line is skipped with a warning) and each of
  its keys becomes a row, with its creation and update times, under the workspace's scope.
- Verified before anything moves: every key is read back with its value. Then the journal is renamed
  ``journal.ndjson.migrated`` (a backup beside it, never deleted by the server). When the check fails the
  journal stays, the error says so, and the next start tries again (rows are upserted: a retry is harmless).
- The workspace cap does not apply to what is migrated: memory that existed is never refused.
- A verified migration is marked in the database (``meta``: ``migrated <scope>``). A journal whose scope is
  marked is never replayed again, only moved aside: where it cannot be moved (a directory that cannot be
  written), every start used to replay it over what memory had become since, bringing back deleted keys and old
  values. A journal that cannot be moved is logged, and the next ones are migrated still.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..store.legacy import replay_lines
from .keys import Refused, parse_segment
from .records import Record
from .workspace import tags_text, words_of

log = logging.getLogger("tinytitan.memory")

JOURNAL = "journal.ndjson"
BACKUP_SUFFIX = ".migrated"


def replay(path: Path) -> tuple[dict[str, Record], str | None]:
    """The keys a journal holds, and the directory it belongs to."""
    records: dict[str, Record] = {}
    workspace: list[str] = []

    def apply(rec: dict) -> None:
        op, at = rec["op"], float(rec.get("at", 0.0))
        if op == "workspace":
            workspace.append(str(rec["path"]))
        elif op == "set":
            old = records.get(rec["key"])
            records[rec["key"]] = Record(rec["key"], str(rec["value"]), int(rec.get("importance") or 3),
                                         rec.get("confidence"), tuple(rec.get("tags") or ()),
                                         old.created if old else float(rec.get("created", at)), at)
        elif op == "append":
            old = records.get(rec["key"])
            if old is None:
                records[rec["key"]] = Record(rec["key"], str(rec["text"]), created=at, updated=at)
            else:
                old.value, old.updated = (old.value + "\n" if old.value else "") + str(rec["text"]), at
        elif op == "delete":
            records.pop(rec["key"], None)
        else:
            raise ValueError(f"unknown record op {op!r}")

    replay_lines(path, apply, log, "memory journal")
    return records, workspace[0] if workspace else None


def journals(directory: Path):
    """Every older journal under ``directory``: (its scope, its path)."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob(f"*/*/*/{JOURNAL}")):
        try:
            parts = tuple(parse_segment(p) for p in path.relative_to(directory).parts[:3])
        except Refused:
            continue
        yield "/".join(parts), path


def migrate_journals(db, directory: Path) -> int:
    """Move every older journal under ``directory`` into ``db``; the number of keys migrated."""
    total = 0
    for scope, path in journals(directory):
        marker = f"migrated {scope}"
        if db.run(lambda tx: tx.row("SELECT 1 FROM meta WHERE name = ?", (marker,)), write=False) is not None:
            _set_aside(path)  # migrated by an earlier start (or another server): never replayed over newer memory
            continue
        try:
            records, workspace = replay(path)
        except OSError as exc:
            log.error("memory journal %s cannot be read (%s): not migrated", path, exc)
            continue

        def write(tx):
            tx.exec("INSERT INTO memory_workspaces (scope, path, created) VALUES (?, ?, ?) ON CONFLICT (scope) "
                    "DO NOTHING", (scope, workspace, min((r.created for r in records.values()), default=0.0)))
            for r in records.values():
                tx.exec("DELETE FROM memory_records WHERE scope = ? AND key = ?", (scope, r.key))
                tx.exec("INSERT INTO memory_records (scope, key, words, value, importance, confidence, tags, "
                        "created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (scope, r.key, words_of(r.key), r.value, r.importance, r.confidence, tags_text(r.tags),
                         r.created, r.updated))

        def check(tx):
            return [r.key for r in records.values() if tx.row(
                "SELECT value FROM memory_records WHERE scope = ? AND key = ?", (scope, r.key)) != (r.value,)]

        db.run(write)
        missing = db.run(check, write=False)
        if missing:
            log.error("memory journal %s: migration not verified (%d of %d keys differ in %s); the journal is left "
                      "in place and tried again at the next start", path, len(missing), len(records), db.where)
            continue
        db.run(lambda tx: tx.exec("INSERT INTO meta (name, value) VALUES (?, 1) ON CONFLICT (name) DO NOTHING",
                                  (marker,)))
        if not _set_aside(path):
            continue
        total += len(records)
        log.warning("memory: %d keys of %s migrated from %s into %s (verified); the journal is kept as %s%s",
                    len(records), workspace or scope, path, db.where, JOURNAL, BACKUP_SUFFIX)
    return total


def _set_aside(path: Path) -> bool:
    """The journal renamed as its backup; False where another server did it first or it cannot be (logged)."""
    try:
        os.replace(path, path.with_name(JOURNAL + BACKUP_SUFFIX))
    except FileNotFoundError:  # another server migrated it meanwhile
        return False
    except OSError as exc:
        log.warning("memory journal %s is migrated but cannot be renamed %s%s (%s): it is left there, and never "
                    "read again", path, JOURNAL, BACKUP_SUFFIX, exc)
        return False
    return True
