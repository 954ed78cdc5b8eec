"""Prompt cache: several token prefixes kept with their KV caches, least recently used evicted first,
bounded in bytes.

Rules:
- ``fetch(prompt)`` finds the entry sharing the longest token prefix with the prompt and returns a KV
  cache holding exactly that prefix, and its length: the number of prompt tokens the decoder skips
  (``cached_tokens`` reports exactly this). At least one prompt token is always left to process.
- An entry wholly inside the prompt is taken out (the decoder extends it in place); an entry that goes
  further than the shared prefix is copied and the copy trimmed, so the longer entry stays for others.
  Caches that cannot be trimmed back (a sliding window past its size, a recurrent state) are only reused when
  the whole entry is a prefix: the longest entry that can be reused wins, not the longest shared prefix.
- ``store(tokens, kv)`` keeps a finished generation's cache under the tokens it really holds (prompt and
  generated tokens, cut at the cache's own offset), evicting old entries over the byte budget. An entry that
  is a prefix of the new one is superseded by it when the new one can be trimmed back to it; a cache that
  cannot be leaves it (a prompt's checkpoint, cache/checkpoint.py, outlives its answer's entry).
- Every read and change of the entries holds one lock: the model thread changes them while the trio side
  reads the stats (``GET /v1/models``).
- A backend with no KV (the scripted backend) keeps ``payload=None``: the same bookkeeping then tells
  what a real cache would reuse.
- With a disk (cache/disk.py) every stored KV cache is also queued to be written there, and a prompt whose
  longest prefix on disk is longer than in memory reads that file back first (a restart keeps the prefixes).
- What an entry's ids say is kept with them as spans (prompt/splice.py): ``remember(ids, spans, decode)``
  notes a prompt as it was prepared; the entry stored for that prompt plus the tokens generated after it gets
  the prompt's spans and a generated span for the answer, so a later prompt that renders the same answer
  there reuses the answer's own ids (``candidates()``).
- Images are keyed by their content: a prompt's image runs (``ImageRun``: where the image's tokens lie, and its
  digest) replace those tokens, for every comparison, by numbers drawn from the digest (negative: never a token
  id), so two prompts that differ only in an image part at that image, and an entry is reused up to it. The
  entry keeps its real ids too, for the splice.
- Where a model's image tokens move the rope positions of what follows (M-RoPE: ``ImageRun.rope_delta``), the
  row's cache holds its keys shifted so its text continues at its cache offset; ``reframe(kv, shift)`` (the
  model's) turns them back before the entry is kept, so every entry holds its tokens at their own positions.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..prompt.splice import Span

log = logging.getLogger("tinytitan.cache")


@dataclass(frozen=True)
class ImageRun:
    """An image's tokens in a prompt: ``start`` to ``end`` (exclusive), and the sha256 (hex) of its bytes;
    ``rope_delta``: how far the rope position of the text after it lags its index (M-RoPE: an image's tokens take
    fewer positions than there are of them), else 0."""
    start: int
    end: int
    digest: str
    rope_delta: int = 0


def keyed(tokens: Sequence[int], images: Sequence[ImageRun] = ()) -> np.ndarray:
    """The ids a prompt is compared by: its image runs' tokens replaced by 28-bit pieces of their digests, negated
    (position j of a run takes piece j mod 9: the whole digest within a run's first nine tokens)."""
    t = np.array(tokens, dtype=np.int64)
    for run in images:
        pieces = [-1 - int(run.digest[7 * k:7 * k + 7], 16) for k in range(9)]
        end = min(run.end, len(t))
        if end > run.start:
            t[run.start:end] = np.resize(np.array(pieces, dtype=np.int64), end - run.start)
    return t


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


def kv_offset(kv: list) -> int | None:
    for c in kv:
        off = getattr(c, "offset", None)
        if isinstance(off, int):
            return off
    return None


def kv_bytes(kv: list | None) -> int:
    if not kv:
        return 0
    total = 0
    for c in kv:
        try:
            total += int(c.nbytes)
        except Exception:  # a cache type without nbytes: count nothing rather than fail a request
            pass
    return total


def kv_trimmable(kv: list) -> bool:
    return all(getattr(c, "is_trimmable", lambda: False)() for c in kv)


def reusable(e: "Entry", prompt: np.ndarray) -> int:
    """How many of ``prompt``'s tokens entry ``e`` can give (at least one prompt token is left to read): the
    shared prefix, where ``e`` holds just that or can be trimmed back to it, else 0."""
    n = min(common_prefix(e.tokens, prompt), len(prompt) - 1)
    if n <= 0 or n == len(e.tokens) or e.payload is None or kv_trimmable(e.payload):
        return max(n, 0)
    return 0


@dataclass
class Entry:
    tokens: np.ndarray
    payload: Any
    nbytes: int
    spans: tuple[Span, ...] = ()  # what a prefix of ``tokens`` says (prompt/splice.py)
    fingerprint: Any = None  # the request that made it (cache_miss.Fingerprint), and where its answer starts
    prompt_length: int | None = None
    ids: np.ndarray | None = None  # its real ids, where images make ``tokens`` (the key) differ from them

    @property
    def real(self) -> np.ndarray | None:
        """Its token ids (None: an entry read back from disk with images, whose ids only its key holds)."""
        if self.ids is not None:
            return self.ids
        return self.tokens if not (self.tokens < 0).any() else None


@dataclass
class Note:
    """A prompt as it was prepared: its ids, their spans, and how to read generated ids back as text."""
    tokens: np.ndarray
    spans: tuple[Span, ...]
    decode: Callable[[Sequence[int]], str]
    fingerprint: Any = None


MAX_NOTES = 64
READ_BACK_GAIN = 32  # a file on disk is read when it holds at least this many more prompt tokens than memory


class PromptCache:
    def __init__(self, max_bytes: int, max_entries: int = 64):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.entries: "OrderedDict[int, Entry]" = OrderedDict()
        self.notes: "OrderedDict[bytes, Note]" = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0  # fetches that found no reusable prefix
        self.reused_tokens = 0
        self.disk = None  # a PromptDisk, where prefixes outlive the process
        self.reframe: Callable[[Any, int], None] | None = None  # turns a row's shifted keys back (see the rules)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._nbytes()

    def _nbytes(self) -> int:  # holding the lock
        return sum(e.nbytes for e in self.entries.values())

    def fetch(self, prompt: Sequence[int], images: Sequence[ImageRun] = ()) -> tuple[Any, int]:
        """(payload holding the first n prompt tokens, n); (None, 0) when nothing is reusable."""
        p = keyed(prompt, images)
        if self.disk is not None:
            self._read_back(p)
        with self._lock:
            best_key, best_n = None, 0
            for key, e in self.entries.items():
                n = reusable(e, p)
                if n > best_n or (n == best_n and best_key is not None and n and len(e.tokens) == n):
                    best_key, best_n = key, n
            if best_key is None or best_n <= 0:
                self.misses += 1
                return None, 0
            e = self.entries[best_key]
            whole = best_n == len(e.tokens)
            if e.payload is None:
                self.entries.move_to_end(best_key)
                payload = None
            elif whole:
                del self.entries[best_key]
                payload = e.payload
            else:
                payload = copy.deepcopy(e.payload)
                self.entries.move_to_end(best_key)
            self.hits += 1
            self.reused_tokens += best_n
        if payload is not None and not whole:
            trimmed = len(e.tokens) - best_n
            for c in payload:
                c.trim(trimmed)
        return payload, best_n

    def store(self, tokens: Sequence[int], payload: Any, images: Sequence[ImageRun] = (),
              checkpoint: bool = False) -> None:
        """Keep ``payload`` under the tokens it holds (``checkpoint``: a prompt read but for its last token,
        cache/checkpoint.py: it takes that prompt's spans and request, and no generated span)."""
        ids = np.asarray(tokens, dtype=np.int64)
        if payload is not None:
            off = kv_offset(payload)
            if off is not None:
                ids = ids[:off]
        if len(ids) == 0:
            return
        shift = -sum(run.rope_delta for run in images)  # where the row's keys stand from their own positions
        if shift and payload is not None and self.reframe is not None:
            self.reframe(payload, -shift)
        t = keyed(ids, images)
        note = self._note_for(t, within=checkpoint)
        spans = self._spans_for(t, note)
        size = kv_bytes(payload)
        if payload is not None and size > self.max_bytes:
            log.warning("prompt cache: a %d-token prefix needs %d MiB, more than --prompt-cache-mib %d; it is not "
                        "kept, so the next turn reads it all again", len(t), size >> 20, self.max_bytes >> 20)
            return
        trimmable = payload is None or kv_trimmable(payload)
        with self._lock:
            # an entry that is a prefix of the new one is superseded by it, where the new one can stand in for it
            for key in [k for k, e in self.entries.items()
                        if len(e.tokens) <= len(t) and common_prefix(e.tokens, t) == len(e.tokens)
                        and (trimmable or len(e.tokens) == len(t))]:
                del self.entries[key]
            self._insert(t, payload, size, spans, note, ids if images else None)
        if self.disk is not None and payload is not None:
            self.disk.put(t, payload, spans)

    def _insert(self, t: np.ndarray, payload: Any, size: int, spans: tuple[Span, ...],
                note: Note | None = None, ids: np.ndarray | None = None) -> None:  # holding the lock
        self.entries[self._next] = Entry(t, payload, size, spans, note.fingerprint if note else None,
                                         len(note.tokens) if note else None, ids)
        self._next += 1
        while self.entries and (self._nbytes() > self.max_bytes or len(self.entries) > self.max_entries):
            key, old = self.entries.popitem(last=False)
            log.debug("prompt cache: evicted %d tokens (%d bytes)", len(old.tokens), old.nbytes)

    def _read_back(self, p: np.ndarray) -> None:
        """A longer prefix on disk than in memory: read it into memory (the model thread, at fetch)."""
        with self._lock:
            in_memory = max((reusable(e, p) for e in self.entries.values()), default=0)
        f, n = self.disk.best(p)
        if f is None or n < in_memory + READ_BACK_GAIN:
            return
        loaded = self.disk.load(f)
        if loaded is None:
            return
        kv, spans = loaded
        size = kv_bytes(kv)
        if size > self.max_bytes:
            return
        with self._lock:
            self._insert(f.tokens, kv, size, spans)
        log.info("prompt cache: read a %d-token prefix back from disk (%.1f MiB)", len(f.tokens), size / 2**20)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.notes.clear()

    # -- what the ids say (prompt/splice.py) ----------------------------------------------------------------
    def remember(self, tokens: Sequence[int], spans: tuple[Span, ...], decode: Callable[[Sequence[int]], str],
                 fingerprint: Any = None, images: Sequence[ImageRun] = ()) -> None:
        """A prompt as prepared: the entry later stored for it (and its answer) knows its spans, and the
        fingerprint of its request (cache/miss.py)."""
        t = keyed(tokens, images)
        key = t.tobytes()
        with self._lock:
            self.notes[key] = Note(t, spans, decode, fingerprint)
            self.notes.move_to_end(key)
            while len(self.notes) > MAX_NOTES:
                self.notes.popitem(last=False)

    def probe(self, prompt: Sequence[int], images: Sequence[ImageRun] = ()):
        """What the cache holds nearest a prompt (cache_miss.Probe), without taking anything: the entry (in memory
        or on disk) sharing the longest prefix, and the longest prefix a recently prepared prompt shared."""
        from .miss import Probe

        p = keyed(prompt, images)
        out = Probe()
        with self._lock:
            out.any_entry = bool(self.entries)
            for e in reversed(self.entries.values()):
                n = common_prefix(e.tokens, p)
                if n > out.n or out.fingerprint is None and n == out.n and e.fingerprint is not None:
                    out.n, out.length, out.fingerprint, out.prompt_length = n, len(e.tokens), e.fingerprint, e.prompt_length
            out.recent = max((common_prefix(note.tokens, p) for note in self.notes.values()), default=0)
        if self.disk is not None:
            f, n = self.disk.peek(p)
            if f is not None and n > out.n:
                out.n, out.length, out.fingerprint, out.prompt_length, out.any_entry = n, len(f.tokens), None, None, True
        out.recent = max(out.recent, out.n)
        return out

    def candidates(self) -> list[tuple[np.ndarray, tuple[Span, ...]]]:
        """Each entry's ids and spans, most recently used first."""
        with self._lock:
            return [(e.real, e.spans) for e in reversed(self.entries.values()) if e.spans and e.real is not None]

    def _note_for(self, t: np.ndarray, within: bool = False) -> Note | None:
        """The longest remembered prompt a stored run of ids starts with (``within``: the shortest one that
        starts with the ids: a checkpoint holds part of its prompt)."""
        with self._lock:
            best = None
            for note in self.notes.values():
                n = len(note.tokens)
                if within:
                    if n >= len(t) and (best is None or n < len(best.tokens)) and \
                            common_prefix(note.tokens, t) == len(t):
                        best = note
                elif n <= len(t) and (best is None or n > len(best.tokens)) and common_prefix(note.tokens, t) == n:
                    best = note
        return best

    def _spans_for(self, t: np.ndarray, best: Note | None) -> tuple[Span, ...]:
        """The spans of a stored run of ids: its prompt's, then what follows it, generated. Nothing when no
        remembered prompt starts it."""
        if best is None:
            return ()
        spans, held = [], 0
        for span in best.spans:  # a prompt read only in part (its client left): the spans it holds whole
            if held + span.tokens > len(t):
                return tuple(spans)
            spans.append(span)
            held += span.tokens
        if len(t) > held:
            spans.append(Span(len(t) - held, best.decode(t[held:].tolist()), True))
        return tuple(spans)

    def stats(self) -> dict:
        """Read from the trio side (``GET /v1/models``) while the model thread changes the entries: under the
        lock, like every change."""
        with self._lock:
            out = {"entries": len(self.entries), "bytes": self._nbytes(), "max_bytes": self.max_bytes,
                   "hits": self.hits, "misses": self.misses, "reused_tokens": self.reused_tokens}
        if self.disk is not None:
            out["disk"] = self.disk.stats()
        return out


def cache_summary(cache: "PromptCache | None") -> dict | None:
    """What ``/health`` and the dashboard show of a model's prompt cache: resident and on-disk size, hit rate."""
    if cache is None:
        return None
    s = cache.stats()
    looked = s["hits"] + s["misses"]
    disk = s.get("disk") or {}
    return {"resident_bytes": s["bytes"], "resident_entries": s["entries"], "max_bytes": s["max_bytes"],
            "disk_bytes": disk.get("bytes", 0), "disk_entries": disk.get("entries", 0),
            "disk_max_bytes": disk.get("max_bytes", 0), "disk_reads": disk.get("reads", 0),
            "disk_writes": disk.get("writes", 0), "disk_pending": disk.get("pending", 0),
            "hits": s["hits"], "misses": s["misses"], "hit_rate": (s["hits"] / looked) if looked else None}
