"""A model's weights' digest: computed once per process, shared by whoever asks (the model listings, the prompt
cache on disk), and never on the event loop.

Rules:
- The digest of a set of weight files is ``sha256:`` and the SHA-256 over ``name:sha256`` lines in name order.
  A file's SHA-256 is its Hugging Face blob name where it has one (unread), else its bytes, remembered on disk
  per (path, size, mtime, inode, ctime) (``file_digest``), so a restart reads nothing again. Size and mtime alone
  are what a copy keeps (``cp -p``, ``rsync -a``, a download tool setting the server's time): a file replaced so
  kept its old digest, and the prompt cache on disk served the old weights' prefixes for the new ones (wrong
  answers). Such a copy cannot keep both the inode (a new file, renamed into place) and the ctime (set by the
  kernel on any write or ``utime``, never by user space); a chmod or a new hard link changes the ctime too, and
  costs one more read of the file, never a wrong digest.
- A converted GGUF's weights (a directory with ``gguf_source.json``) are a function of the GGUF's bytes and the
  directory's name (converter version and form): their digest is made from those, and the float32 copy (4–8×
  the GGUF) is never read for it.
- One computation per set of files (as they are now) per process: a caller that asks while another computes
  waits for that result instead of reading the files again.
- ``digest`` reads files: it blocks, so it runs on a worker thread (the listings' ``trio.to_thread``, the prompt
  cache's writer thread); ``remembered`` answers without reading any weight bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from .cache_dir import cache_root

_lock = threading.Lock()
_results: dict[str, str] = {}
_running: dict[str, threading.Event] = {}


def _stamp(st: os.stat_result) -> str:
    """What says a file's bytes are the ones hashed (see the rules): what a copy keeps and what it cannot."""
    return f"{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_ctime_ns}"


def _digest_memo(path: Path) -> tuple[str, Path, dict]:
    st = path.stat()
    key = f"{path.resolve()}|{_stamp(st)}"
    memo_path = cache_root() / "gguf" / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    return key, memo_path, memo if isinstance(memo, dict) else {}


def remembered_file_digest(path: Path) -> str | None:
    """``file_digest`` where it is remembered (nothing of the file read), else None."""
    key, _, memo = _digest_memo(path)
    return memo.get(key)


def file_digest(path: Path) -> str:
    """The file's SHA-256, remembered per (path, size, mtime, inode, ctime) in ``<cache>/gguf/digests.json`` so a second
    start does not read a multi-gigabyte file again."""
    key, memo_path, memo = _digest_memo(path)
    if key in memo:
        return memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    memo[key] = h.hexdigest()
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_name(f".digests.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(memo, indent=0))
        os.replace(tmp, memo_path)
    except OSError:
        pass  # a read-only cache: the digest is computed again next time
    return memo[key]


def file_sha256(path: Path) -> str:
    """One file's SHA-256 (hex), remembered on disk."""
    return file_digest(path)


def _blob_name(f: Path) -> str | None:
    """A Hugging Face cache names each weight blob by its SHA-256: a snapshot's link says it, unread."""
    if f.is_symlink():
        name = f.resolve().name
        if len(name) == 64 and all(c in "0123456789abcdef" for c in name):
            return name
    return None


def _key(files: list[Path]) -> str:
    return "|".join(f"{p.resolve()}:{_stamp(p.stat())}" for p in sorted(files))


def _combine(named: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for name, sha in sorted(named):
        h.update(f"{name}:{sha}\n".encode())
    return "sha256:" + h.hexdigest()


def _converted(files: list[Path]) -> str | None:
    """The digest of a converted GGUF's weights, from its source's digest and its directory's name; None for
    files that are not one conversion's."""
    dirs = {f.resolve().parent for f in files}
    if len(dirs) != 1:
        return None
    source = next(iter(dirs)) / "gguf_source.json"
    try:
        digest = json.loads(source.read_text()).get("digest")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(digest, str) or not digest:
        return None
    return "sha256:" + hashlib.sha256(f"{digest}\n{source.parent.name}\n".encode()).hexdigest()


def remembered(files: list[Path]) -> str | None:
    """The digest where no weight bytes need reading (computed already, a conversion's, or every file's SHA-256
    known), else None."""
    try:
        key = _key(files)
        with _lock:
            if key in _results:
                return _results[key]
        converted = _converted(files)
        if converted is not None:
            return converted
        shas = [(f.name, _blob_name(f) or remembered_file_digest(f)) for f in files]
    except OSError:
        return None
    return None if any(sha is None for _, sha in shas) else _combine(shas)


def digest(files: list[Path]) -> str:
    """The weights' digest (blocking: it may read every byte of the files the first time)."""
    files = list(files)
    key = _key(files)
    with _lock:
        if key in _results:
            return _results[key]
        running = _running.get(key)
        if running is None:
            running = _running[key] = threading.Event()
            owner = True
        else:
            owner = False
    if not owner:
        running.wait()
        with _lock:
            if key in _results:
                return _results[key]
        return digest(files)  # the first caller failed: try again here
    try:
        result = _converted(files) or _combine([(f.name, _blob_name(f) or file_sha256(f)) for f in files])
        with _lock:
            _results[key] = result
        return result
    finally:
        with _lock:
            _running.pop(key, None)
        running.set()

