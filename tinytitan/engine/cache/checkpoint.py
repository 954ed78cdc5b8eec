"""A checkpoint at the end of a prompt, for KV caches that cannot be trimmed back.

An agent resends the whole conversation every turn: the next prompt is this prompt, the answer as the client
sends it back, and a new turn. The prompt cache reuses the longest entry it can: the previous turn's entry
(prompt and answer) when the answer comes back as the same tokens, else — for a cache that can be trimmed —
that entry trimmed back to where the prompts part. A cache that cannot be trimmed back (a sliding window once
it holds more than its size: Gemma 3's local layers; a recurrent state) serves only a prompt it is wholly a
prefix of, so an answer that comes back as other tokens (a model's non-canonical tokenization re-tokenized, an
edited or re-serialised answer) used to cost the whole prompt again, its images encoded again.

Rules:
- When a row (every prompt is read on the row's own KV cache) has read all of its prompt but the token its
  first sample is taken after (step.py ``step_alone``: the natural point, and the one a resent identical prompt reuses too), ``keep`` stores a
  snapshot of that cache in the prompt cache as the entry for that prefix, its images keyed as the row's. The
  answer's entry, stored at the row's end (rows.py), does not supersede it where that entry cannot be trimmed
  back (memory.py: past its window), so the next turn reuses one or the other, whichever reaches further, and
  reads only what follows; one that can be (its answer ended within the window) supersedes it and stands in.
- Only where it is needed: a prompt other rows wait to read (``ChatRequest.shared_prompt``: a request's other
  choices, which then read only its last token), a cache that cannot be trimmed now, or one that may not be by
  the row's end (a sliding window that its answer could fill: offset plus the tokens the row may still add
  reaching its size).
  A cache that stays trimmable needs none: the answer's entry is trimmed back to where the next prompt parts
  (and supersedes a checkpoint it can stand in for).
- The snapshot is mlx-lm's public cache API: each layer's ``state`` on new array handles, made into a cache of
  the same class with ``from_state`` (disk_files.snapshot; mlx arrays are values: the row extending its live
  cache in place copies a shared buffer first, and never changes the checkpoint). The entry counts against the
  prompt cache's byte budget like any other and goes to the disk cache like any other.
- Only where the prompt cache holds no entry that serves those tokens (``PromptCache.holds``): neither one of
  exactly those tokens (a request's other choices, which start from the first's checkpoint and so reach the same
  point, would each pay a snapshot, a copy of the whole KV cache, and a disk write for an entry that only
  replaces the one there) nor a longer one that can be trimmed back to them and stays so as it grows (a first
  choice that ended before a later one's first step: its answer's entry superseded the checkpoint, and stands in
  for the one the later choice would make as it would have superseded that one too). A longer entry with a
  window does not count though it is within it now: its conversation's next turn takes it out and may extend it
  past the window; the checkpoint taken instead serves these tokens after that, and outlives the later choice's
  own answer where that goes past the window (one that ends within it supersedes it, as above).
- Only where it and the answer's entry fit the budget together (twice its size: ``fits``): else the answer's
  entry, stored last, would evict it anyway, after it had evicted older entries (another conversation's) to fit.
  (Whether a shared prompt that does not fit is handed to its request's other rows instead is decided before,
  in cache/handoff.py's ``keep_prompt``: nothing here knows of requests.)
- Not on a rank of a group (mlx.launch): each rank holds its part of the layers, so whether a cache can be
  trimmed may differ between ranks, and every rank must start a row from the same prefix (group/lockstep.py).
- A checkpoint that cannot be made costs a later turn a re-read, never the row: it is logged, not raised.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from .disk_files import snapshot
from .entries import ImageRun, kv_bytes, kv_offset, kv_trimmable

log = logging.getLogger("tinytitan.cache")


def wanted(kv: list, more: int) -> bool:
    """Whether a cache needs a checkpoint to be reused at this point later: it cannot be trimmed back now, or
    may not be once ``more`` tokens are added (a layer with a window, ``max_size``, that they could fill)."""
    if not kv_trimmable(kv):
        return True
    for c in kv:
        size, offset = getattr(c, "max_size", None), getattr(c, "offset", None)
        if isinstance(size, int) and isinstance(offset, int) and offset + more >= size:
            return True
    return False


def target(backend: Any) -> Any:
    """Where a backend's rows keep their checkpoints: its prompt cache; None on a rank of a group (see the
    rules)."""
    if getattr(backend, "group", None) is not None:
        return None
    return getattr(backend, "prompt_cache", None)


def holds(kv: list, tokens: Sequence[int]) -> bool:
    """Whether ``kv`` may be kept as holding ``tokens``: neither empty, and its offset (where it keeps one: a
    recurrent state does not) theirs."""
    if not kv or not tokens:
        return False
    held = kv_offset(kv)
    return held is None or held == len(tokens)


def fits(prompt_cache: Any, kv: list) -> bool:
    """Whether ``prompt_cache`` would hold a checkpoint of ``kv`` beside its answer's entry (see the rules)."""
    return 2 * kv_bytes(kv) <= prompt_cache.max_bytes


def keep(prompt_cache: Any, tokens: Sequence[int], kv: list, images: Sequence[ImageRun], more: int,
         shared: bool = False) -> bool:
    """Store a snapshot of ``kv``, which holds ``tokens`` (a recurrent state keeps no offset to say so), in
    ``prompt_cache`` where it is ``wanted`` (or ``shared``: other rows wait to read the same prompt) and fits (see
    the rules). True when one was stored, or an entry that serves ``tokens`` is held already."""
    if prompt_cache is None or not holds(kv, tokens) or not (shared or wanted(kv, more)):
        return False
    held = len(tokens)
    if prompt_cache.holds(tokens, images):  # (another choice of its request kept it, or an answer's entry that
        # can be trimmed back to it stands in for it: no second snapshot)
        log.debug("prompt cache: a %d-token prompt's checkpoint is held already", held)
        return True
    if not fits(prompt_cache, kv):
        log.debug("prompt cache: no checkpoint of a %d-token prompt (%d MiB): it and its answer's entry would not "
                  "fit the budget together", held, kv_bytes(kv) >> 20)
        return False
    try:
        prompt_cache.store(list(tokens), snapshot(kv), images, checkpoint=True)
    except Exception:  # the row goes on: a later turn reads this prefix again, no more
        log.exception("the prompt cache could not keep a checkpoint of a %d-token prompt", held)
        return False
    log.debug("prompt cache: a checkpoint at the end of a %d-token prompt", held)
    return True
