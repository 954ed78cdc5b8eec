"""Stored Responses objects, event-sourced.

Rules:
- A stored response is its own input items (item references resolved, ids assigned), the id of the
  response it continued, and its event log: the wire events its machine emitted. GET answers the
  ``response`` inside the last event; ``previous_response_id`` replays input and output of the chain.
- The newest ``keep`` responses are kept (256 by default); older ones are forgotten.
- On disk: one append-only JSON-lines file, ``responses.jsonl``: ``{"op": "put", ...}`` and
  ``{"op": "delete", "id": ...}`` records. Loading replays it. A torn last record (a crash mid-write)
  is skipped with a warning and cut off, so nothing before it is lost and the next append starts clean.
  When the file holds far more records than are kept, it is rewritten (atomically) with the live ones.
- ``memory`` keeps everything in this process only.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger("tinytitan.store")

FILE_NAME = "responses.jsonl"
MEMORY = "memory"


def default_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tinytitan" / "responses"


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


class ResponsesStore:
    def __init__(self, directory: Path | None = None, keep: int = 256):
        self.directory = directory
        self.keep = keep
        self.records: OrderedDict[str, StoredResponse] = OrderedDict()
        self.lines = 0
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._load()

    @classmethod
    def open(cls, where: str | Path | None, keep: int = 256) -> "ResponsesStore":
        """``memory``, a directory, or None (the user's state directory)."""
        if where == MEMORY:
            return cls(None, keep)
        return cls(Path(where).expanduser() if where else default_dir(), keep)

    @property
    def path(self) -> Path | None:
        return self.directory / FILE_NAME if self.directory is not None else None

    # -- reading ---------------------------------------------------------------------------------------------
    def get(self, response_id: str) -> StoredResponse | None:
        return self.records.get(response_id)

    def find_item(self, item_id: str) -> dict | None:
        """An input or output item of any stored response, by its id (newest first)."""
        for rec in reversed(self.records.values()):
            for item in rec.input + rec.output:
                if item.get("id") == item_id:
                    return item
        return None

    # -- writing ---------------------------------------------------------------------------------------------
    def put(self, rec: StoredResponse) -> None:
        self._apply_put(rec)
        self._append({"op": "put", **asdict(rec)})

    def delete(self, response_id: str) -> bool:
        if self.records.pop(response_id, None) is None:
            return False
        self._append({"op": "delete", "id": response_id})
        return True

    def _apply_put(self, rec: StoredResponse) -> None:
        self.records.pop(rec.id, None)
        self.records[rec.id] = rec
        while len(self.records) > self.keep:
            self.records.popitem(last=False)

    def _append(self, record: dict) -> None:
        if self.path is None:
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.lines += 1
        if self.lines > 2 * self.keep and self.lines > 2 * len(self.records):
            self._rewrite()

    def _rewrite(self) -> None:
        assert self.path is not None
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in self.records.values():
                f.write(json.dumps({"op": "put", **asdict(rec)}, ensure_ascii=False, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.lines = len(self.records)

    # -- loading ---------------------------------------------------------------------------------------------
    def _load(self) -> None:
        path = self.path
        assert path is not None
        if not path.exists():
            return
        data = path.read_bytes()
        good_end = 0  # byte offset just past the last complete, readable record
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl + 1
            raw = data[pos:end]
            last = end >= len(data)
            try:
                record = json.loads(raw.decode("utf-8"))
                if nl < 0:
                    raise ValueError("no line end")
                self._replay(record)
                good_end = end
                self.lines += 1
            except (ValueError, UnicodeDecodeError, TypeError, KeyError) as exc:
                if last:
                    log.warning("%s: skipped a torn last record (%d bytes: %s); the %d records before it are kept",
                                path, len(raw), exc, self.lines)
                else:
                    log.warning("%s: skipped an unreadable record at byte %d (%s)", path, pos, exc)
                    good_end = end
            pos = end
        if good_end < len(data):
            with open(path, "r+b") as f:  # cut the torn tail: the next append starts on a clean line
                f.truncate(good_end)
        log.info("responses store %s: %d stored responses", path, len(self.records))

    def _replay(self, record: dict) -> None:
        op = record.get("op")
        if op == "put":
            body = {k: v for k, v in record.items() if k != "op"}
            self._apply_put(StoredResponse(**body))
        elif op == "delete":
            self.records.pop(record["id"], None)
        else:
            raise ValueError(f"unknown record op {op!r}")
