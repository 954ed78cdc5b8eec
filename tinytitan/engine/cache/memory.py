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
  cannot be leaves it (a prompt's checkpoint, cache/checkpoint.py, outlives its answer's entry). So is an
  entry whose prompt the new one starts with, all but a transient opening where one is known (what the template
  writes only for the turn it generates: Qwen3's empty think block; prompt/rendering.py), but whose answer it
  parts from (the answer came back otherwise: re-serialised, its thinking dropped; or the template writes that
  turn otherwise once answered): all it held beyond the new one is that turn. So is an entry whose generation
  finished with no tool call (``answered_finally``) and whose request the new one's continues after that answer
  (``Fingerprint.answered_by``: then a new user message, before which a Qwen3-style template drops the thinking
  of the turns the entry holds). An entry whose answer called a tool never gives way by its request: its loop
  may go on from it while a side request forks it with a user message of its own.
- What an entry knows of its request (``PromptFacts``: its prompt's length, the part a later turn repeats, the
  request's fingerprint) is what the row that stores it hands over (``store(facts=)``; a raw prompt's: its
  length alone), never looked up among other prompts: so every rank of a group, where a follower prepares no
  prompt and has the facts from rank 0's message, makes the same decisions on the same entries, and starts each
  row from the same prefix (group/lockstep.py). A row whose prompt was read only in part (its client left)
  hands over facts its entry cannot use: it knows none. Only a checkpoint (never on a group) takes those of
  the prompt remembered nearest (the shortest that starts with its ids).
- Every rank of a group keeps the same entries of the same size: a follower keeps of a row what rank 0 kept
  (``store(like=)``: a ``Kept``, which rank 0's message carries with the row's ending), the same ids (where a stop
  string only rank 0 sees ended it inside a verified draft, the follower accepted more) counted at rank 0's size
  (under pipeline parallelism each rank holds other layers: counting its own bytes, a rank would evict other
  entries once the budget is reached).
- Every read and change of the entries holds one lock: the model thread changes them while the trio side
  reads the stats (``GET /v1/models``).
- Entries and notes are found by the prefix they share with a prompt through a ``PrefixIndex``
  (cache/prefix_index.py), changed with them, never by comparing the prompt with each: entries in two, those
  that can be trimmed back (or hold no KV) and those reused only whole. Where several share the longest
  prefix, ``fetch`` takes a whole one (nothing to copy) before one to trim (one next to the prompt in the
  index's order); the diagnosis (``probe``) reports one whose request is known, the most recently used first.
  ``entries`` is a read-only view for tests and tools, read without the lock.
- A backend with no KV (the scripted backend) keeps ``payload=None``: the same bookkeeping then tells
  what a real cache would reuse.
- With a disk (cache/disk.py) every stored KV cache is also queued to be written there, and a prompt whose
  longest prefix on disk is longer than in memory reads that file back first (a restart keeps the prefixes);
  where it fails to load or holds more than the budget, the next best, ``READ_BACK_TRIES`` files at most.
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
import itertools
import logging
import threading
from collections import OrderedDict
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..prompt.splice import Span
from .entries import (Entry, ImageRun, Kept, Note, PromptFacts, holds_answer, keyed, kv_bytes, kv_offset,
                      kv_stays_trimmable, kv_trimmable)
from .prefix_index import PrefixIndex, Reusable, common_prefix

log = logging.getLogger("tinytitan.cache")

MAX_NOTES = 64
READ_BACK_GAIN = 32  # a file on disk is read when it holds at least this many more prompt tokens than memory
READ_BACK_TRIES = 2  # files read for one prompt, at most (the next best where one failed or was too large)


class PromptCache:
    def __init__(self, max_bytes: int, max_entries: int = 64):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: "OrderedDict[int, Entry]" = OrderedDict()  # least recently used first
        self._held: Reusable[Entry] = Reusable()  # the entries by their ids
        self._notes: "OrderedDict[bytes, Note]" = OrderedDict()
        self._noted: PrefixIndex[Note] = PrefixIndex()
        self._next = 0
        self._tick = itertools.count(1)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0  # fetches that found no reusable prefix
        self.reused_tokens = 0
        self.disk = None  # a PromptDisk, where prefixes outlive the process
        self.reframe: Callable[[Any, int], None] | None = None  # turns a row's shifted keys back (see the rules)

    @property
    def entries(self) -> Mapping[int, Entry]:
        """The entries, least recently used first (a view: only the cache, which indexes them, changes them)."""
        return MappingProxyType(self._entries)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._nbytes()

    def _nbytes(self) -> int:  # holding the lock
        return sum(e.nbytes for e in self._entries.values())

    def holds(self, tokens: Sequence[int], images: Sequence[ImageRun] = ()) -> bool:
        """Whether an entry holds ``tokens`` (with ``images``) for a prompt that goes on from them: one of exactly
        those, or one that starts with them and can be trimmed back to them now and as it grows (no window, no
        recurrent state: ``kv_stays_trimmable``). A longer one is an answer's, which its own conversation's next
        turn takes out whole and extends in place: one with a window may go past it, and then serves only
        prompts it is wholly a prefix of. Nothing is taken or touched."""
        with self._lock:
            t = keyed(tokens, images)
            return len(t) > 0 and any(len(e.tokens) == len(t) or (e.trimmable and (e.payload is None or
                                      kv_stays_trimmable(e.payload))) for e in self._held.starting_with(t))

    def fetch(self, prompt: Sequence[int], images: Sequence[ImageRun] = (), shared: bool = False) -> tuple[Any, int]:
        """(payload holding the first n prompt tokens, n); (None, 0) when nothing is reusable. A whole entry is
        taken out, unless ``shared`` (other rows will read the same prompt): then, as a part, copied."""
        p = keyed(prompt, images)
        if self.disk is not None:
            self._read_back(p)
        with self._lock:
            best_key, best_n = self._best(p)
            if best_key is None:
                self.misses += 1
                return None, 0
            e = self._entries[best_key]
            whole = best_n == len(e.tokens)
            if e.payload is None:
                self._touch(best_key)
                payload = None
            elif whole and not shared:
                self._drop(best_key)
                payload = e.payload
            else:
                payload = copy.deepcopy(e.payload)
                self._touch(best_key)
            self.hits += 1
            self.reused_tokens += best_n
        if payload is not None and not whole:
            trimmed = len(e.tokens) - best_n
            for c in payload:
                c.trim(trimmed)
        return payload, best_n

    def _best(self, p: np.ndarray) -> tuple[int | None, int]:
        """The key of the entry giving most of prompt ``p``'s tokens, and how many (``Reusable.best``; lock held)."""
        e, n = self._held.best(p)
        return (None if e is None else e.key), n

    def store(self, tokens: Sequence[int], payload: Any, images: Sequence[ImageRun] = (),
              checkpoint: bool = False, facts: PromptFacts | None = None, like: Kept | None = None) -> int | None:
        """Keep ``payload`` under the tokens it holds (``checkpoint``: a prompt read but for its last token,
        cache/checkpoint.py: it takes that prompt's spans and request, and no generated span; ``facts``: what the
        request of the generation that stores it says of its prompt, see the rules; ``like``: what rank 0 kept of
        the row, on a group follower: counted at its size, none where it kept none) → the entry's key (None: not
        kept), for ``answered_finally``."""
        if like is not None and like.tokens == 0:  # rank 0 kept none of it
            return None
        ids = np.asarray(tokens, dtype=np.int64)
        if payload is not None:
            off = kv_offset(payload)
            if off is not None:
                ids = ids[:off]
        if len(ids) == 0:
            return None
        shift = -sum(run.rope_delta for run in images)  # where the row's keys stand from their own positions
        if shift and payload is not None and self.reframe is not None:
            self.reframe(payload, -shift)
        t = keyed(ids, images)
        note = self._note_for(t, within=checkpoint)
        spans = self._spans_for(t, note)
        if facts is None:  # a checkpoint (or a caller with no row): the prompt remembered nearest
            facts = note.facts() if note is not None else None
        elif facts.length > len(t):  # a prompt read only in part (its client left): no answer past it
            facts = None
        size = kv_bytes(payload) if like is None else like.nbytes
        if payload is not None and size > self.max_bytes:
            with self._lock:
                self._noted_evicted(t)
            (log.warning if self.max_bytes else log.debug)("prompt cache: a %d-token prefix needs %d MiB, more than "
                "--prompt-cache-mib %d; it is not kept, so the next turn reads it all again", len(t), size >> 20,
                self.max_bytes >> 20)  # (a budget of 0: the cache off on purpose, nothing to warn of)
            return None
        trimmable = payload is None or kv_trimmable(payload)
        with self._lock:
            # an entry that is a prefix of the new one is superseded by it, where the new one can stand in for it
            for e in self._held.prefixes_of(t) if trimmable else self._held.exact(t):
                self._drop(e.key)
            if not checkpoint:
                for e in self._answered_otherwise(t, trimmable, facts.fingerprint if facts is not None else None):
                    self._drop(e.key)
            key = self._insert(t, payload, size, spans, facts, ids if images else None)
        if self.disk is not None and payload is not None:
            self.disk.put(t, payload, spans, facts.lasting if facts is not None else None)
        return key

    def kept(self, key: int | None) -> Kept:
        """What the entry ``key`` holds (0 ids: no such entry)."""
        with self._lock:
            e = self._entries.get(key)
            return Kept(len(e.tokens), e.nbytes) if e is not None else Kept(0, 0)

    def answered_finally(self, key: int | None) -> None:
        """The generation that stored the entry ``key`` finished its turn with no tool call (decode/rows.py, once
        its output is parsed): a later request that sends its answer back goes on from a user message."""
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                e.final = True

    def _insert(self, t: np.ndarray, payload: Any, size: int, spans: tuple[Span, ...],
                facts: PromptFacts | None = None, ids: np.ndarray | None = None) -> int | None:  # holding the lock
        trimmable = payload is None or kv_trimmable(payload)
        e = Entry(t, payload, size, spans, facts.fingerprint if facts else None, facts.length if facts else None,
                  ids, trimmable, next(self._tick), self._next, facts.lasting if facts else None)
        self._entries[self._next] = e
        self._held.add(t, e, trimmable)
        self._next += 1
        while self._entries and (self._nbytes() > self.max_bytes or len(self._entries) > self.max_entries):
            old = self._drop(next(iter(self._entries)))
            self._noted_evicted(old.tokens)
            log.debug("prompt cache: evicted %d tokens (%d bytes)", len(old.tokens), old.nbytes)
        return e.key if e.key in self._entries else None

    def _answered_otherwise(self, t: np.ndarray, trimmable: bool, fingerprint: Any) -> list[Entry]:
        """The entries holding an answer that the new entry ``t`` (of the request ``fingerprint``) stands in for,
        though it parts from them before their end: what such an entry holds beyond the new one is a turn no later
        prompt is expected to repeat. (Each turn of such a conversation left a copy of it all: 6 turns, 6
        entries.) Either
        - ``t`` can be trimmed back and starts with the entry's prompt (the part a later turn repeats:
          ``Entry.lasting_prompt``) but parts from its answer: the client sent that answer back otherwise
          (re-serialised, edited, its thinking dropped), or the template writes that turn otherwise once answered
          (Qwen3's empty think block, written only for the turn being generated); or
        - the entry's own answer was final (``Entry.final``: its generation finished with no tool call) and the
          new request continues the entry's after it (``Fingerprint.answered_by``): every later request of that
          conversation goes on from a new user message, before which a Qwen3-style template drops the thinking of
          the turns the entry holds, so no later prompt renders them as it does. (The entry's own answer, not
          the new request's alone: a copy of the entry's request answered otherwise, in parallel, may go on with
          its tool loop from it.)
        Holding the lock."""
        return [e for e in self._entries.values() if holds_answer(e.prompt_length, len(e.tokens))
                and common_prefix(e.tokens, t) < len(t)  # one holding all of ``t`` (a shorter regeneration) stays
                and ((trimmable and e.answered and e.lasting_prompt <= len(t)
                      and common_prefix(e.tokens[:e.lasting_prompt], t) == e.lasting_prompt)
                     or (e.final and fingerprint is not None and e.fingerprint is not None
                         and e.fingerprint.answered_by(fingerprint) and common_prefix(e.tokens, t) < len(e.tokens)))]

    def _noted_evicted(self, t: np.ndarray) -> None:  # holding the lock
        """The prompts an entry of ids ``t`` held are evicted with it (for the diagnosis: ``probe``)."""
        for _, notes in self._noted.prefixes_of(t):
            for note in notes:
                note.evicted = True

    def _drop(self, key: int) -> Entry:  # holding the lock
        e = self._entries.pop(key)
        self._held.discard(e.tokens, e, e.trimmable)
        return e

    def _touch(self, key: int) -> None:  # holding the lock
        self._entries.move_to_end(key)
        self._entries[key].used = next(self._tick)

    def _read_back(self, p: np.ndarray) -> None:
        """A longer prefix on disk than in memory: read it into memory (the model thread, at fetch)."""
        with self._lock:
            in_memory = self._best(p)[1]
        for _ in range(READ_BACK_TRIES):  # one that fails to load, or turns out too large, gives way to the next
            # of the files that do not say they hold more than the budget keeps (read, then dropped), the longest
            f, n = self.disk.best(p, lambda f: f.fits(self.max_bytes))
            if f is None or n < in_memory + READ_BACK_GAIN:
                return
            if (loaded := self.disk.load(f)) is not None and (size := kv_bytes(loaded[0])) <= self.max_bytes:
                break
            if loaded is not None:  # (a file that did not say its size: read once)
                self.disk.forget(f)
        else:
            return
        kv, spans = loaded
        # what the file says of its request (where its answer starts, the part a later turn repeats): so the next
        # turn's entry supersedes it as it would the entry the file was written from
        facts = PromptFacts(f.prompt_tokens, f.lasting_prompt) if f.prompt_tokens is not None else None
        with self._lock:
            self._insert(f.tokens, kv, size, spans, facts)
        log.info("prompt cache: read a %d-token prefix back from disk (%.1f MiB)", len(f.tokens), size / 2**20)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held.clear()
            self._notes.clear()
            self._noted.clear()

    def evict_all(self) -> None:
        """Every entry goes, as the byte budget would take them; what was prepared (the notes) stays."""
        with self._lock:
            for key in list(self._entries):
                self._noted_evicted(self._drop(key).tokens)

    # -- what the ids say (prompt/splice.py) ----------------------------------------------------------------
    def remember(self, tokens: Sequence[int], spans: tuple[Span, ...], decode: Callable[[Sequence[int]], str],
                 fingerprint: Any = None, images: Sequence[ImageRun] = (), lasting_prompt: int | None = None) -> Note:
        """A prompt as prepared: the entry later stored for it (and its answer) knows its spans, the
        fingerprint of its request (cache/miss.py) and how many of its ids a later turn repeats
        (``lasting_prompt``: prompt/rendering.py) → the note (``Note.facts``: what its row hands to ``store``)."""
        t = keyed(tokens, images)
        key = t.tobytes()
        note = Note(t, spans, decode, fingerprint, next(self._tick), lasting_prompt)
        with self._lock:
            old = self._notes.pop(key, None)
            if old is not None:
                self._noted.discard(old.tokens, old)
            self._notes[key] = note
            self._noted.add(t, note)
            while len(self._notes) > MAX_NOTES:
                _, gone = self._notes.popitem(last=False)
                self._noted.discard(gone.tokens, gone)
        return note

    def probe(self, prompt: Sequence[int], images: Sequence[ImageRun] = ()):
        """What the cache holds nearest a prompt (cache_miss.Probe), without taking anything: the entry (in memory
        or on disk) sharing the longest prefix, and the longest prefix a recently prepared prompt shared (and
        whether an entry holding that prompt was evicted since: else it kept none yet, cache/miss.py)."""
        from .miss import Probe

        p = keyed(prompt, images)
        out = Probe()
        with self._lock:
            out.any_entry = bool(self._entries)
            n = self._held.longest(p)[0]
            # of those sharing that many (all start with them: at most max_entries), the one whose request is
            # known, the most recently used first
            e = max(self._held.starting_with(p[:n]), key=lambda e: (e.fingerprint is not None, e.used), default=None)
            if e is not None and (n or e.fingerprint is not None):
                out.n, out.length, out.fingerprint, out.prompt_length = n, len(e.tokens), e.fingerprint, e.prompt_length
            out.recent = self._noted.longest(p)[0]
            out.evicted = out.recent > 0 and any(note.evicted for _, notes in self._noted.starting_with(p[:out.recent])
                                                 for note in notes)
        if self.disk is not None:
            f, n = self.disk.peek(p, lambda f: f.fits(self.max_bytes))  # (what a fetch would read back)
            if f is not None and n > out.n:
                out.n, out.length, out.fingerprint, out.prompt_length, out.any_entry = n, len(f.tokens), None, None, True
        out.recent = max(out.recent, out.n)
        return out

    def candidates(self) -> list[tuple[np.ndarray, tuple[Span, ...]]]:
        """Each entry's ids and spans, most recently used first."""
        with self._lock:
            return [(e.real, e.spans) for e in reversed(self._entries.values()) if e.spans and e.real is not None]

    def disk_candidates(self) -> list[tuple[np.ndarray, tuple[Span, ...]]]:
        """The answers on disk (a restart's), for a prompt no entry in memory splices an answer into."""
        return self.disk.candidates() if self.disk is not None else []

    def _note_for(self, t: np.ndarray, within: bool = False) -> Note | None:
        """The longest remembered prompt a stored run of ids starts with (``within``: the shortest one that
        starts with the ids: a checkpoint holds part of its prompt)."""
        with self._lock:
            if within:  # the shortest; of several as short, the one remembered last
                notes = [note for _, ns in self._noted.starting_with(t) for note in ns]
                return min(notes, key=lambda note: (len(note.tokens), -note.seq), default=None)
            return next((ns[0] for _, ns in self._noted.prefixes_of(t)), None)

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
            out = {"entries": len(self._entries), "bytes": self._nbytes(), "max_bytes": self.max_bytes,
                   "hits": self.hits, "misses": self.misses, "reused_tokens": self.reused_tokens}
        if self.disk is not None:
            out["disk"] = self.disk.stats()
        return out

