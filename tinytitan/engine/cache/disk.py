"""Cached prompt prefixes on disk: they outlive a restart.

Rules:
- One file per prefix, mlx-lm's own format (``save_prompt_cache`` / ``load_prompt_cache``, safetensors). Its
  metadata says which model wrote it (the weights' digest: ``models.weights_digest``, computed once and shown
  by the model listings too), the format version, the cache layout (cache classes, KV heads and widths, dtype, KV
  bits; a vision model's processor configuration) and the ids it holds (with their spans, so an answer's ids stay
  spliceable after a restart: the index hands the most recently used answers to the splice where memory has none,
  ``candidates``, before their files are read back). The file name is a digest of all of that.
- Written off the request path: ``put`` hands a snapshot to the writer thread (a snapshot replaces one still
  waiting whose ids it starts with, where it can be trimmed back to it: the newest of a conversation; another
  conversation's, even one opening with the same system prompt, stays queued); the file is written under a
  temporary name (a dot-name, never read as a cache file) and renamed into place, so a torn file is never read. A
  prefix already on disk is not written again, unless its file failed to load (it is written anew); a file whose
  ids are a prefix of the new one's is removed (superseded) where the new one can be trimmed back to it, as in
  memory (a prompt's checkpoint outlives its answer's file: cache/checkpoint.py). So is a file whose prompt the
  new one starts with, all but a transient opening, but whose answer it parts from (the answer came back
  otherwise, or the template writes that turn otherwise once answered), as in memory: a file says where its answer
  starts (``tinytitan_prompt_tokens``; one written before that said nothing is left alone) and how much of its
  prompt a later turn repeats, where that was known (``tinytitan_lasting_prompt``; else all of it). A directory
  that cannot be used (its index cannot be read) keeps nothing queued.
- Bounded: past ``max_bytes`` the least recently used files (modification time, touched on each read) go,
  down to ``EVICT_TO`` of it. The directory is counted (every file's size, every model's) only when the bytes
  written there since the last count — by any model of this process: one ``Tally`` per directory — may have
  taken it past the budget: a full directory about once per tenth of the budget written, where counting after
  every write cost the writer thread ~10 ms of the GIL a generation at a few thousand files. Files another
  process writes there are counted at the next count.
- Read back (``best`` then ``load``) when it holds a longer prefix of a prompt than memory does (a file whose
  cache cannot be trimmed back, as its metadata says, only where it is wholly a prefix of the prompt). The files
  are found by their ids through a ``PrefixIndex`` per cache layout (cache/prefix_index.py), never by comparing
  a prompt with each: a lookup costs the same for ten files or ten thousand. A file of
  another model is left alone; one of this model but another format version or layout is ignored with a warning,
  never misread. One of this model and format that fails to load (torn, damaged: mlx says only RuntimeError, so
  whatever the reason) is removed with a warning, as is one whose header is damaged: left there, it was indexed
  again at every start, to fail again (a warning and a wasted read each time); it is a cache, computed again.
- The snapshot is taken on the model thread (``snapshot``): new array handles on the cache's current buffers,
  evaluated there, so the writer thread only reads memory and the decoder may go on extending the live cache.
- The writer thread, its queue and its end at exit: cache/disk_writer.py.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import struct
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ...models import weights_digest
from ..prompt.splice import Span
from .disk_files import (FORMAT, OnDisk, SUFFIX, SUPERSEDED, answered, cache_files, default_dir, entry_of, evict_lru,
                         metadata, owners_only, prompt_tokens, read_metadata, recent_answers, remove, save_whole,
                         snapshot, spans_of, tally_of)
from .disk_writer import Writer
from .prefix_index import PrefixIndex, Reusable, common_prefix

log = logging.getLogger("tinytitan.cache")

MIN_TOKENS = 64  # shorter prefixes are cheaper to read again than to keep
INDEX_WAIT = 5.0  # seconds a first lookup waits for the directory's index
EVICT_TO = 0.9  # once over its budget, the directory is brought back to this share of it


class PromptDisk:
    def __init__(self, directory: Path, weight_files: list[Path], layout: Callable[[], str], max_bytes: int,
                 queued_bytes: int | None = None):
        """``layout()`` is called on the model thread on first use (it needs the loaded model); ``queued_bytes``: what
        the snapshots waiting to be written may hold (the memory cache's budget; else ``max_bytes``)."""
        self.dir = Path(directory)
        self.weight_files = list(weight_files)
        self._layout_fn = layout
        self.max_bytes = max_bytes
        self._digest: str | None = None
        self._layout: str | None = None
        self._index: dict[Path, OnDisk] | None = None  # this model's files, once the directory is read
        self._by_layout: dict[str, Reusable[OnDisk]] = {}  # ... by layout
        self._answered: dict[str, PrefixIndex[OnDisk]] = {}  # ... those with an answer to trim, by their prompt
        self._lock = threading.Lock()  # the index's
        self._wake = threading.Condition(self._lock)  # the index is read
        self._checked = False
        self._writer = Writer(self._prepare, lambda item: self._write(*item), "tinytitan-prompt-disk",
                              max_bytes if queued_bytes is None else queued_bytes, place=str(self.dir))
        self.reads = 0
        self.writes = 0
        self.read_tokens = 0
        self._tally = tally_of(self.dir)  # the directory's bytes, as last counted and written since

    def start(self) -> None:
        """Start the writer thread: it first reads the weights' digest and the directory's index, off the
        request path (a server with one model starts it at once; a catalog's model on first use)."""
        self._writer.start()

    @property
    def waiting(self) -> int:
        """The writes not done yet."""
        return self._writer.waiting

    # -- identity ------------------------------------------------------------------------------------------
    @property
    def digest(self) -> str:
        if self._digest is None:  # (the writer thread, first: the digest the model listings share)
            self._digest = weights_digest.digest(self.weight_files)
        return self._digest

    @property
    def layout(self) -> str:
        if self._layout is None:
            self._layout = self._layout_fn()
        return self._layout

    def _name(self, tokens: np.ndarray, layout: str) -> str:
        h = hashlib.sha256(f"{FORMAT}\n{self.digest}\n{layout}\n".encode())
        h.update(tokens.astype(np.int32).tobytes())
        return h.hexdigest()[:40]

    # -- the index -----------------------------------------------------------------------------------------
    def ready(self) -> bool:
        with self._lock:
            return self._index is not None

    def _held(self, wait: float = 0.0) -> Reusable[OnDisk] | None:
        """This model's files of this layout; None until the directory is read (``_indexed``) or where it holds none."""
        if not self._indexed(wait):
            return None
        self.check_layouts()
        layout = self.layout
        with self._lock:
            return self._by_layout.get(layout)

    def _indexed(self, wait: float) -> bool:
        """Whether the index holds files, once read (waited for up to ``wait`` s: reading a few headers)."""
        self.start()
        if wait and self._digest is None and weights_digest.remembered(self.weight_files) is None:
            wait = 0  # the weights are being hashed for the first time: no file of this model can be waiting
        deadline = time.monotonic() + wait
        with self._lock:
            while self._index is None and time.monotonic() < deadline:
                self._wake.wait(0.02)
            return bool(self._index)

    def _add(self, f: OnDisk) -> None:  # holding the lock
        self._forget_locked(f.path)
        self._index[f.path] = f
        self._by_layout.setdefault(f.layout, Reusable()).add(f.tokens, f, f.trimmable)
        if answered(f):
            self._answered.setdefault(f.layout, PrefixIndex()).add(f.tokens[:f.lasting_prompt], f)

    def _forget_locked(self, path: Path) -> None:  # holding the lock
        f = self._index.pop(path, None) if self._index is not None else None
        if f is not None:
            self._by_layout[f.layout].discard(f.tokens, f, f.trimmable)
            if answered(f):
                self._answered[f.layout].discard(f.tokens[:f.lasting_prompt], f)

    def _scan(self) -> None:
        """The directory's files of this model, from their headers (the writer thread, at start)."""
        found, others, stale, now = [], 0, 0, time.time()
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # the owner's only: the files hold the prompts
        if self.dir == default_dir() and self.dir.stat().st_mode & 0o077:  # (made open by an earlier version)
            owners_only(self.dir, 0o700)
        for p in sorted(cache_files(self.dir)):
            try:
                meta = read_metadata(p)
                st = p.stat()
                size = st.st_size
                if st.st_mode & 0o077:  # written before prefixes were the owner's only: made so now
                    owners_only(p, 0o600)
            except FileNotFoundError:  # another server on the directory evicted it meanwhile
                continue
            except (OSError, ValueError, struct.error) as exc:
                log.warning("prompt cache on disk: %s cannot be read (%s); ignored", p.name, exc)
                continue
            if meta.get("tinytitan_format") in SUPERSEDED:
                stale += 1
                try:
                    p.unlink()
                except OSError:
                    pass
                continue
            if meta.get("tinytitan_weights") not in (None, self.digest):
                others += 1
                continue
            if meta.get("tinytitan_format") != FORMAT:
                log.warning("prompt cache on disk: %s was written by another version (format %s); ignored", p.name,
                            meta.get("tinytitan_format"))
                continue
            try:
                found.append(entry_of(p, meta, size, st.st_mtime))
            except (ValueError, TypeError) as exc:  # a damaged header: this file alone goes, not the directory
                log.warning("prompt cache on disk: %s has a damaged header (%s); %s", p.name, exc, remove(p))
        for tmp in self.dir.glob(".*.tmp*"):  # a write a crash cut short: never read, cleaned up
            try:
                if now - tmp.stat().st_mtime > 600:
                    tmp.unlink()
            except OSError:
                pass
        if stale:
            log.info("prompt cache on disk: %d file(s) of an earlier format removed from %s", stale, self.dir)
        if others:
            log.info("prompt cache on disk: %d file(s) of other models in %s left alone", others, self.dir)
        if found:
            log.info("prompt cache on disk: %d prefix(es) of this model in %s (%.1f MiB)", len(found), self.dir,
                     sum(f.nbytes for f in found) / 2**20)
        with self._lock:
            self._index, self._by_layout, self._answered = {}, {}, {}
            for f in found:
                self._add(f)

    def check_layouts(self) -> None:
        """Warn once about this model's files of another cache layout (model thread: the layout needs the
        model)."""
        if self._checked or not self.ready():
            return
        self._checked = True
        layout = self.layout  # (on first use: the model, outside the lock)
        with self._lock:
            other = [f for f in (self._index or {}).values() if f.layout != layout]
        by_layout: dict[str, list[OnDisk]] = {}
        for f in other:
            by_layout.setdefault(f.layout, []).append(f)
        for written, files in by_layout.items():  # one line a layout (an upgrade can leave hundreds of files)
            log.warning("prompt cache on disk: %d file(s) in %s (e.g. %s) were written for another cache layout "
                        "(%s, now %s); ignored: they go as the directory's least recently used", len(files),
                        self.dir, files[0].path.name, written, layout)

    def best(self, prompt: np.ndarray, fits: Callable[[OnDisk], bool] | None = None) -> tuple[OnDisk | None, int]:
        """The file that gives the most of ``prompt``'s tokens (at least one left to read), and how many: the
        prefix it shares with the prompt, where it can be trimmed back to that or is wholly that prefix; of the
        files ``fits`` takes, where given (``Reusable.best``)."""
        held = self._held(wait=INDEX_WAIT)
        if held is None:
            return None, 0
        with self._lock:
            return held.best(prompt, fits)

    def candidates(self) -> list[tuple[np.ndarray, tuple[Span, ...]]]:
        """The answers on disk a prompt's ids are spliced with (``recent_answers``): the first turn after a restart
        reads the last answer as it was generated."""
        if not self._indexed(INDEX_WAIT):
            return []
        with self._lock:
            return recent_answers(self._index.values())

    def peek(self, prompt: np.ndarray, fits: Callable[[OnDisk], bool] | None = None) -> tuple[OnDisk | None, int]:
        """What ``best`` would give (the file a lookup with the same ``fits`` reads back, and how many ids), without
        waiting or touching the model (any thread): only once the index is read and the layout known."""
        with self._lock:
            held = self._by_layout.get(self._layout) if self._index and self._layout is not None else None
            return (None, 0) if held is None else held.best(prompt, fits)

    def load(self, f: OnDisk) -> tuple[list, tuple[Span, ...]] | None:
        """The KV cache a file holds and its spans; None (the file removed, with a warning) where it fails."""
        from mlx_lm.models.cache import load_prompt_cache

        import mlx.core as mx

        try:
            kv, meta = load_prompt_cache(str(f.path), return_metadata=True)
            mx.eval([c.state for c in kv])
            if meta.get("tinytitan_layout") != self.layout or meta.get("tinytitan_weights") != self.digest:
                raise ValueError("its metadata changed since it was indexed")
            spans = spans_of(meta)
        except Exception as exc:  # a damaged file is never misread: it is removed (see the rules)
            self._forget(f.path)
            gone = remove(f.path)
            if gone is not None:  # (None: another server on the directory evicted it meanwhile)
                log.warning("prompt cache on disk: %s could not be read back (%s: %s); %s", f.path.name,
                            type(exc).__name__, exc, gone)
            return None
        try:
            os.utime(f.path)  # recently used
        except OSError:
            pass
        f.used = time.time()
        self.reads += 1
        self.read_tokens += len(f.tokens)
        return kv, spans

    def forget(self, f: OnDisk) -> None:
        """A file no longer read back by this process (the prompt cache cannot keep what it holds)."""
        self._forget(f.path)

    def _forget(self, path: Path) -> None:
        with self._lock:
            self._forget_locked(path)

    # -- writing -------------------------------------------------------------------------------------------
    def put(self, tokens: np.ndarray, kv: list, spans: tuple[Span, ...], lasting_prompt: int | None = None) -> None:
        """Queue a cache to be written (called on the model thread, right after the generation is stored), with
        how much of its prompt a later turn repeats, where that is known (prompt/rendering.py)."""
        if len(tokens) < MIN_TOKENS or self._writer.refuses():  # (no snapshot taken for a directory that cannot
            return                                              # be used, nor once exiting)
        held = self._held()
        if held is not None:
            with self._lock:
                if held.exact(tokens):
                    return
        from .entries import kv_bytes, kv_trimmable

        layout = self.layout  # here, on the model thread
        snap = snapshot(kv)
        trimmable = kv_trimmable(snap)
        def supersedes(waiting: tuple) -> bool:  # a waiting snapshot this one starts with gives way (see the rules)
            ids, waiting_snap = waiting[0], waiting[1]
            return (trimmable and len(ids) <= len(tokens) and np.array_equal(ids, tokens[:len(ids)])
                    and kv_trimmable(waiting_snap))

        self._writer.put(tokens.tobytes(), (tokens, snap, spans, layout, lasting_prompt), supersedes, kv_bytes(snap))

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued write is on disk (tests, shutdown)."""
        return self._writer.flush(timeout)

    def _prepare(self) -> bool:
        """The writer thread's first work: the weights' digest and the directory's index → whether it can be used."""
        try:
            self.digest
            self._scan()
            with self._lock:
                self._wake.notify_all()  # (a first lookup waits for the index)
            return True
        except Exception:
            log.warning("prompt cache on disk: %s cannot be used", self.dir, exc_info=True)
            with self._lock:  # nothing will be written (the writer keeps nothing waiting either)
                self._index = {}
                self._wake.notify_all()
            return False

    def _write(self, tokens: np.ndarray, snap: list, spans: tuple[Span, ...], layout: str,
               lasting_prompt: int | None = None) -> None:
        from .entries import kv_bytes, kv_trimmable

        path = self.dir / (self._name(tokens, layout) + SUFFIX)
        with self._lock:
            if path in (self._index or {}):  # on disk and readable (one that failed to load was dropped: rewritten)
                return
        trimmable, held = kv_trimmable(snap), kv_bytes(snap)
        # (never another writer's: a replica on a shared volume may have this process's id, pid 1 in a container)
        tmp = self.dir / f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{SUFFIX}"
        prompt = prompt_tokens(spans)
        save_whole(snap, metadata(self.digest, layout, tokens, spans, trimmable, prompt, lasting_prompt, held), tmp,
                   path)
        entry = OnDisk(path, tokens, path.stat().st_size, layout, trimmable, prompt, lasting_prompt, spans, time.time(),
                       held)
        self.writes += 1
        superseded = []
        with self._lock:
            if self._index is None:
                self._index = {}
            held = self._by_layout.get(layout)
            if held is not None and trimmable:  # files whose ids are a prefix of the new one's, or their prompt
                answered_by_prompt = [f for _, fs in self._answered.get(layout, PrefixIndex()).prefixes_of(tokens)
                                      for f in fs if common_prefix(f.tokens, tokens) < len(tokens)]  # (see memory.py)
                superseded = list({f.path: f for f in held.prefixes_of(tokens) + answered_by_prompt
                                   if f.path != path}.values())
            for f in superseded:
                self._forget_locked(f.path)
            self._add(entry)
        gone = 0
        for f in superseded:
            try:
                f.path.unlink()
                gone += f.nbytes
            except OSError:
                pass
        self._tally.add(entry.nbytes - gone)
        self._evict()

    def _evict(self) -> None:
        """The least recently used files go while the directory is over its budget (every model's files count),
        down to ``EVICT_TO`` of it; nothing is counted while what was written since the last count keeps it
        within the budget (writer thread)."""
        if self._tally.within(self.max_bytes):
            return
        total, gone = evict_lru(self.dir, self.max_bytes, EVICT_TO)
        for p in gone:
            self._forget(p)
        self._tally.counted(total)

    # -- what it holds -------------------------------------------------------------------------------------
    def stats(self) -> dict:
        with self._lock:
            index = list((self._index or {}).values())
        pending = self._writer.waiting
        return {"dir": str(self.dir), "entries": len(index), "bytes": sum(f.nbytes for f in index), "pending": pending,
                "max_bytes": self.max_bytes, "reads": self.reads, "writes": self.writes,
                "read_tokens": self.read_tokens}
