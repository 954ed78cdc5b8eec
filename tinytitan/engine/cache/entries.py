"""What a prompt cache holds: an entry (a token prefix, its KV cache and what its ids say), a note of a prompt as
it was prepared, the key prompts are compared by (images replaced by their digests), and what the cache asks of a
KV cache (its offset, size, whether it can be trimmed back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..prompt.splice import Span
from .miss import Fingerprint


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


def kv_stays_trimmable(kv) -> bool:
    """Whether every layer of a KV cache can be trimmed back now and stays so as it grows (what drafting needs:
    a rejected draft is trimmed off): no sliding-window layer (mlx-lm's rotating cache cannot be trimmed once
    past its window) and no recurrent state (never trimmable)."""
    def stays(c) -> bool:
        inner = getattr(c, "caches", None)  # mlx-lm's CacheList: its layers'
        if isinstance(inner, (list, tuple)):
            return all(stays(x) for x in inner)
        return getattr(c, "max_size", None) is None and getattr(c, "is_trimmable", lambda: False)()

    return isinstance(kv, list) and all(stays(c) for c in kv)


# -- what an entry (or a file on disk: cache/disk_files.py) holds past its prompt ------------------------------
def lasting_part(lasting: int | None, prompt: int | None) -> int | None:
    """How many of a prompt's ``prompt`` ids a later turn repeats: ``lasting`` where known and within the prompt
    (prompt/rendering.py), else all of them (None: no prompt known)."""
    return lasting if lasting is not None and prompt is not None and lasting <= prompt else prompt


def holds_answer(prompt: int | None, held: int) -> bool:
    """Whether ``held`` ids go past a prompt of ``prompt`` ids (None: not known): an answer follows it."""
    return prompt is not None and prompt < held


def gives_way_by_prompt(trimmable: bool, lasting: int | None, prompt: int | None, held: int) -> bool:
    """Whether an entry or file of ``held`` ids may be superseded by a later one that starts with the ``lasting``
    ids of its prompt (``prompt`` ids) but parts from its answer: one that holds an answer and can be trimmed back."""
    return bool(trimmable and lasting) and holds_answer(prompt, held)


@dataclass(frozen=True)
class PromptFacts:
    """What the request a generation answers says of its prompt, kept with the entry the generation stores: how
    many ids the prompt has, how many of them a later turn repeats (prompt/rendering.py; None: all) and the
    request's fingerprint (cache/miss.py; None: not known). The row carries them from its preparation, on every
    rank of a group alike (group/lockstep.py): an entry is known by the request that made it (cache/memory.py's
    rules say where else an entry's facts come from)."""
    length: int
    lasting: int | None = None
    fingerprint: Any = None

    def as_json(self) -> list:
        """As a JSON value (rank 0's message to a group's followers: group/lockstep.py)."""
        return [self.length, self.lasting,
                self.fingerprint.as_json() if isinstance(self.fingerprint, Fingerprint) else None]

    @classmethod
    def from_json(cls, value: list | None) -> "PromptFacts | None":
        if value is None:
            return None
        length, lasting, fingerprint = value
        return cls(length, lasting, Fingerprint.from_json(fingerprint) if fingerprint is not None else None)


@dataclass(frozen=True)
class Kept:
    """What an entry holds: how many ids, and the bytes it counts at against the budget. A group follower keeps of
    each row what rank 0 kept of it (group/lockstep.py): the same ids, counted at the same size (0 ids: none)."""
    tokens: int
    nbytes: int


@dataclass
class Entry:
    tokens: np.ndarray
    payload: Any
    nbytes: int
    spans: tuple[Span, ...] = ()  # what a prefix of ``tokens`` says (prompt/splice.py)
    fingerprint: Any = None  # the request that made it (cache_miss.Fingerprint), and where its answer starts
    prompt_length: int | None = None
    ids: np.ndarray | None = None  # its real ids, where images make ``tokens`` (the key) differ from them
    trimmable: bool = True  # it can be trimmed back to a shorter prefix (or holds no KV to trim)
    used: int = 0  # when it was last stored or fetched (a tick of its cache)
    key: int = 0  # its place in the cache's table
    lasting_prompt: int | None = None  # how many of its prompt's ids a later turn repeats: all but a transient
    # opening the template writes only for the turn it generates (prompt/rendering.py); all where that is not known
    final: bool = False  # its generation ended its turn with no tool call (``PromptCache.answered_finally``)
    real: np.ndarray | None = field(init=False)  # its token ids (None: an entry read back from disk with images,
    # whose ids only its key holds)

    def __post_init__(self):
        self.real = self.ids if self.ids is not None else self.tokens if not (self.tokens < 0).any() else None
        self.lasting_prompt = lasting_part(self.lasting_prompt, self.prompt_length)

    @property
    def answered(self) -> bool:
        """It holds an answer past its prompt, and can be trimmed back to the part of its prompt a later turn
        repeats (``gives_way_by_prompt``)."""
        return gives_way_by_prompt(self.trimmable, self.lasting_prompt, self.prompt_length, len(self.tokens))


@dataclass
class Note:
    """A prompt as it was prepared: its ids, their spans, and how to read generated ids back as text."""
    tokens: np.ndarray
    spans: tuple[Span, ...]
    decode: Callable[[Sequence[int]], str]
    fingerprint: Any = None
    seq: int = 0  # when it was remembered (a tick of its cache)
    lasting_prompt: int | None = None  # how many of its ids a later turn repeats (prompt/rendering.py; None: all)
    evicted: bool = False  # an entry holding it was evicted (the byte budget), or would not fit it (cache/miss.py)

    def facts(self) -> PromptFacts:
        return PromptFacts(len(self.tokens), self.lasting_prompt, self.fingerprint)
