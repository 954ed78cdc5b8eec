"""One workspace's memory: an append-only NDJSON journal, and the state its replay builds.

Rules:
- Every change is a record appended to ``journal.ndjson``: ``workspace`` (the directory it belongs to,
  written once), ``set``, ``append``, ``delete``. The state is the replay of the records, in order; a
  ``set`` that rewrites a key keeps the key's creation time.
- A record is written before it is applied: a write that fails (a full or read-only disk) raises
  ``WriteFailed`` and the state is unchanged, so a caller never reports a lost write as saved. A write that
  fails part way is cut off again (the file ends where it did before the record), so the records after it
  still replay; when even that cut fails, every later write is refused until it succeeds. A closed
  journal refuses writes too: a write must never be kept in memory only while the caller thinks it is saved.
- A torn last line (a crash mid-write) is dropped on replay; every record before it is kept. The writer
  cuts it off so the next record starts on a clean line; a reader (the CLI, while a server runs) only skips it.
- One writer per workspace: the writer holds an exclusive ``flock`` on the journal for as long as it is open.
  When the lock is taken (another server) or the file cannot be opened, the journal still replays what it can
  and then keeps changes in memory only: ``persistent`` is False and ``why_not`` says why.
- Durability: a write reaches the OS at once; an fsync barrier follows within ``barrier_delay`` seconds of the
  first write after the last barrier (a thread owned by the journal, joined on ``close``), or inline for every
  write with ``fsync=True``.
- At open, a journal holding far more records than keys is rewritten as one ``set`` per key (``created`` kept),
  the new file locked and fsynced before it replaces the old one, and the directory fsynced after, so the
  rename itself survives a crash.
- Files are the owner's only (0600, directories 0700). Log lines name operations and sizes, never contents.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .keys import Refused, parse_key, parse_prefix, parse_segment, under

log = logging.getLogger("tinytitan.memory")

JOURNAL = "journal.ndjson"
MAX_VALUE_BYTES = 64 * 1024
MAX_TAGS = 16
SUMMARY_CHARS = 200
COMPACT_SLACK = 512  # records beyond four per key before the journal is rewritten at open


class WriteFailed(OSError):
    """A record could not be written: nothing changed."""


@dataclass
class Record:
    key: str
    value: str
    importance: int = 3
    confidence: float | None = None
    tags: tuple[str, ...] = ()
    created: float = 0.0
    updated: float = 0.0

    @property
    def summary(self) -> str:
        return summarize(self.value)

    def brief(self) -> dict:
        out = {"key": self.key, "summary": self.summary, "importance": self.importance,
               "updated": _iso(self.updated)}
        if self.tags:
            out["tags"] = list(self.tags)
        return out

    def full(self) -> dict:
        out = {"key": self.key, "value": self.value, "importance": self.importance, "created": _iso(self.created),
               "updated": _iso(self.updated)}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.tags:
            out["tags"] = list(self.tags)
        return out


def summarize(value: str, limit: int = SUMMARY_CHARS) -> str:
    """The first non-empty line, at most ``limit`` characters (an ellipsis marks a cut)."""
    line = next((ln.strip() for ln in value.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def check_value(value: object) -> str:
    if not isinstance(value, str):
        raise Refused("value must be a string")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        raise Refused(f"value is {size} bytes (at most {MAX_VALUE_BYTES})")
    return value


def check_importance(importance: object) -> int:
    if isinstance(importance, bool) or not isinstance(importance, (int, float)) or importance != int(importance) \
            or not 1 <= importance <= 5:
        raise Refused("importance must be a whole number from 1 (trivia) to 5 (must not be forgotten)")
    return int(importance)


def check_confidence(confidence: object) -> float | None:
    if confidence is None:
        return None
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        raise Refused("confidence must be a number from 0 to 1")
    return float(confidence)


def check_tags(tags: object) -> tuple[str, ...]:
    if tags is None:
        return ()
    if not isinstance(tags, list) or len(tags) > MAX_TAGS:
        raise Refused(f"tags must be a list of at most {MAX_TAGS} names")
    return tuple(dict.fromkeys(parse_segment(t, "tag") for t in tags))


_WORD = re.compile(r"[a-z0-9]+")


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (the directory's entry is what a crash would otherwise lose)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        log.warning("memory directory %s: not synced (%s)", path, exc)
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        log.warning("memory directory %s: not synced (%s)", path, exc)
    finally:
        os.close(fd)


class Journal:
    def __init__(self, path: Path | None, *, fsync: bool = False, barrier_delay: float = 1.0):
        self.path = path
        self.fsync = fsync
        self.barrier_delay = barrier_delay
        self.records: dict[str, Record] = {}
        self.workspace_path: str | None = None
        self.lines = 0
        self.persistent = False
        self.why_not: str | None = "memory only: no journal file"
        self._fd: int | None = None
        self._closed = False
        self._torn: int | None = None  # where the file must be cut back to before the next record (a failed cut)
        self._cond = threading.Condition()
        self._due: float | None = None
        self._closing = False
        self._barrier: threading.Thread | None = None

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, workspace_path: str | None = None, *, fsync: bool = False,
             barrier_delay: float = 1.0) -> "Journal":
        """The writer's journal: locked, replayed, torn tail cut. Falls back to memory only (saying why)
        when the file cannot be opened or another process holds it."""
        j = cls(path, fsync=fsync, barrier_delay=barrier_delay)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            j.why_not = f"the journal cannot be opened ({exc.strerror or exc})"
            log.warning("memory journal %s: %s; memory is kept in RAM only", path, j.why_not)
            return j
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            j.why_not = "another server holds this workspace's memory"
            log.warning("memory journal %s: %s; this server runs without persistence (its writes will not "
                        "outlive it)", path, j.why_not)
            j._replay(truncate=False)
            return j
        j._fd = fd
        j.persistent, j.why_not = True, None
        j._replay(truncate=True)
        if j.lines > 4 * len(j.records) + COMPACT_SLACK:
            j._compact()
        if workspace_path and j.workspace_path is None:
            j._write({"op": "workspace", "path": workspace_path, "at": time.time()})
        return j

    @classmethod
    def read(cls, path: Path) -> "Journal":
        """A reader's copy (no lock, nothing written): what the journal held when it was read."""
        j = cls(path)
        j.why_not = "read only"
        j._replay(truncate=False)
        return j

    def close(self) -> None:
        """Flush the pending barrier, release the lock. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._barrier is not None:
            self._barrier.join()
            self._barrier = None
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                log.error("memory journal %s: final fsync failed: %s", self.path, exc)
            os.close(self._fd)
            self._fd = None
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    # -- reading -------------------------------------------------------------------------------------------
    def get(self, key: str) -> Record | None:
        return self.records.get(parse_key(key))

    def list(self, prefix: str = "") -> list[Record]:
        prefix = parse_prefix(prefix)
        return sorted((r for r in self.records.values() if under(r.key, prefix)), key=lambda r: r.key)

    def ranked(self) -> list[Record]:
        """Most important first; among equals, the older fact first."""
        return sorted(self.records.values(), key=lambda r: (-r.importance, r.created, r.key))

    def search(self, text: str = "", prefix: str = "", tags: tuple[str, ...] = (), min_importance: int = 1,
               limit: int = 10) -> list[Record]:
        """Lexical: every query word found in a key outweighs any number found in bodies (a key hit 10, a tag
        hit 5, a body hit 1 per occurrence up to 3); then importance, then the older fact."""
        prefix = parse_prefix(prefix)
        words = _WORD.findall((text or "").lower())
        scored = []
        for r in self.records.values():
            if not under(r.key, prefix) or r.importance < min_importance or not set(tags) <= set(r.tags):
                continue
            key, body, rtags = r.key.lower(), r.value.lower(), [t.lower() for t in r.tags]
            score = 0
            for w in words:
                score += 10 * (w in key) + 5 * any(w in t for t in rtags) + min(body.count(w), 3)
            if words and score == 0:
                continue
            scored.append((-score, -r.importance, r.created, r.key, r))
        return [s[-1] for s in sorted(scored, key=lambda s: s[:4])[:limit]]

    # -- writing -------------------------------------------------------------------------------------------
    def set(self, key: str, value: str, importance: int | None = None, confidence: float | None = None,
            tags: list[str] | None = None) -> Record:
        key, value = parse_key(key), check_value(value)
        old = self.records.get(key)
        rec = {"op": "set", "key": key, "value": value,
               "importance": check_importance(importance) if importance is not None
               else (old.importance if old else 3),
               "confidence": check_confidence(confidence) if confidence is not None else (old and old.confidence),
               "tags": list(check_tags(tags)) if tags is not None else list(old.tags if old else ()),
               "at": time.time()}
        self._write(rec)
        log.info("memory set: key %d chars, value %d bytes", len(key), len(value.encode("utf-8", "replace")))
        return self.records[key]

    def append(self, key: str, text: str) -> Record:
        key = parse_key(key)
        if not isinstance(text, str):
            raise Refused("text must be a string")
        old = self.records.get(key)
        check_value((old.value + "\n" if old and old.value else "") + text)
        self._write({"op": "append", "key": key, "text": text, "at": time.time()})
        log.info("memory append: key %d chars, text %d bytes", len(key), len(text.encode("utf-8", "replace")))
        return self.records[key]

    def delete(self, key: str) -> bool:
        key = parse_key(key)
        if key not in self.records:
            return False
        self._write({"op": "delete", "key": key, "at": time.time()})
        log.info("memory delete: key %d chars", len(key))
        return True

    def _write(self, record: dict) -> None:
        if self._closed:
            raise WriteFailed(errno.EBADF, "the memory journal is closed")
        if self._fd is not None:
            line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8",
                                                                                                  "surrogatepass")
            start = self._torn if self._torn is not None else os.lseek(self._fd, 0, os.SEEK_END)
            try:
                if self._torn is not None:
                    os.ftruncate(self._fd, self._torn)
                    self._torn = None
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view):]
                if self.fsync:
                    os.fsync(self._fd)
            except OSError as exc:
                log.error("memory journal %s: a %s record of %d bytes could not be written: %s", self.path,
                          record["op"], len(line), exc)
                self._cut(start)
                raise WriteFailed(exc.errno, f"the memory journal could not be written ({exc.strerror or exc})")
            self.lines += 1
            if not self.fsync:
                self._schedule_barrier()
        self._apply(record)

    def _cut(self, size: int) -> None:
        """After a failed write: the file back to ``size`` bytes, so a partly written record does not run into
        the next one. When the cut fails too, it is retried before the next record (which fails if it cannot)."""
        try:
            if os.fstat(self._fd).st_size > size:
                os.ftruncate(self._fd, size)
            self._torn = None
        except OSError as exc:
            self._torn = size
            log.error("memory journal %s: a partly written record could not be cut off (%s); writes are refused "
                      "until it can", self.path, exc)

    def _compact(self) -> None:
        """Rewrite the journal as one record per key (at open, when it holds far more records than keys). The
        new file is locked before it replaces the old one, so the workspace never has two writers."""
        assert self.path is not None and self._fd is not None
        tmp = self.path.with_name(self.path.name + ".tmp")
        records = ([{"op": "workspace", "path": self.workspace_path, "at": 0.0}] if self.workspace_path else []) + [
            {"op": "set", "key": r.key, "value": r.value, "importance": r.importance, "confidence": r.confidence,
             "tags": list(r.tags), "at": r.updated, "created": r.created} for r in self.records.values()]
        data = "".join(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n" for rec in records)
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            log.warning("memory journal %s: not compacted (%s)", self.path, exc)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            view = memoryview(data.encode("utf-8", "surrogatepass"))
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            os.close(fd)
            log.warning("memory journal %s: not compacted (%s)", self.path, exc)
            return
        fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd = fd
        log.info("memory journal %s: compacted from %d records to %d", self.path, self.lines, len(records))
        self.lines = len(records)

    # -- the barrier ---------------------------------------------------------------------------------------
    def _schedule_barrier(self) -> None:
        with self._cond:
            if self._due is None:
                self._due = time.monotonic() + self.barrier_delay
                self._cond.notify_all()
            if self._barrier is None:
                self._barrier = threading.Thread(target=self._barriers, name="tinytitan-memory-fsync", daemon=True)
                self._barrier.start()

    def _barriers(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (self._due is None or self._due > time.monotonic()):
                    self._cond.wait(None if self._due is None else self._due - time.monotonic())
                if self._closing:
                    return  # close() syncs last
                self._due = None
            try:
                os.fsync(self._fd)
            except OSError as exc:
                log.error("memory journal %s: fsync failed: %s", self.path, exc)

    # -- replay --------------------------------------------------------------------------------------------
    def _replay(self, truncate: bool) -> None:
        try:
            data = self.path.read_bytes() if self.path is not None else b""
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("memory journal %s cannot be read: %s", self.path, exc)
            return
        good_end = pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl + 1
            try:
                if nl < 0:
                    raise ValueError("no line end")
                self._apply(json.loads(data[pos:end].decode("utf-8")))
                self.lines += 1
                good_end = end
            except (ValueError, UnicodeDecodeError, TypeError, KeyError, AttributeError) as exc:
                if end >= len(data):
                    log.warning("memory journal %s: dropped a torn last line (%d bytes: %s); the %d records "
                                "before it are kept", self.path, end - pos, type(exc).__name__, self.lines)
                else:
                    log.warning("memory journal %s: skipped an unreadable record at byte %d", self.path, pos)
                    good_end = end
            pos = end
        if truncate and good_end < len(data) and self._fd is not None:
            os.ftruncate(self._fd, good_end)
        log.info("memory journal %s: %d keys from %d records", self.path, len(self.records), self.lines)

    def _apply(self, rec: dict) -> None:
        op, at = rec["op"], float(rec.get("at", 0.0))
        if op == "workspace":
            self.workspace_path = self.workspace_path or str(rec["path"])
        elif op == "set":
            key = rec["key"]
            old = self.records.get(key)
            self.records[key] = Record(key, str(rec["value"]), int(rec.get("importance") or 3), rec.get("confidence"),
                                       tuple(rec.get("tags") or ()),
                                       old.created if old else float(rec.get("created", at)), at)
        elif op == "append":
            key = rec["key"]
            old = self.records.get(key)
            if old is None:
                self.records[key] = Record(key, str(rec["text"]), created=at, updated=at)
            else:
                old.value = (old.value + "\n" if old.value else "") + str(rec["text"])
                old.updated = at
        elif op == "delete":
            self.records.pop(rec["key"], None)
        else:
            raise ValueError(f"unknown record op {op!r}")
