"""A prompt that several rows of one request read (its choices: ``ChatRequest.shared_prompt``), handed from the row
that read it to the others where the prompt cache will not hold it (``--prompt-cache-mib 0``, or a prompt whose KV
cache and answer would not fit the budget together): else the others, which wait for the first to read it, would
read it all again after.

Rules:
- One ``HandOffs`` per engine (``Engine.handoffs``), made with it and handed to each of its rows (``Row``): two
  engines in one process never see each other's, whatever ids their requests carry. None on a group of machines
  (mlx.launch): every rank must start a row from the same prefix, and a follower's rows hold no request, so none
  is handed there, as no checkpoint is kept there (checkpoint.target).
- ``keep_prompt`` is the one place that decides, once the first row has read its prompt but for its last token:
  a shared prompt (no images: their keys may stand shifted, which the prompt cache turns back) whose checkpoint
  the prompt cache will not hold (``checkpoint.fits``) is held here for its request (``ChatRequest.response_id``)
  alone, outside the cache's budget; any other prompt is the prompt cache's concern (``checkpoint.keep``).
- A row of the same request whose prompt it is a prefix of (all but the last token) takes a copy of it where the
  prompt cache offers less (``or_handed``: ``Backend.start``, where a row's cache starts). That row then reads
  the same prompt to the same point: it hands nothing more on (``holds``), so a prompt's KV cache is held once
  per request, not once per choice.
- It is dropped when its request has ended (``Engine.end_unit``: the protocol calls it once every choice
  has, after their rows have let go), so nothing outlives the request that made it; a row that comes after that
  reads its prompt, no more.
- The model thread adds and takes, the trio side drops: one lock.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any, Sequence

from . import checkpoint
from .disk_files import snapshot

log = logging.getLogger("tinytitan.cache")


class HandOffs:
    def __init__(self):
        self._held: dict[str, list[tuple[tuple[int, ...], Any]]] = {}  # request -> (prompt tokens, KV cache)
        self._lock = threading.Lock()

    def put(self, owner: str, tokens: Sequence[int], kv: Any) -> None:
        tokens = tuple(tokens)
        with self._lock:
            held = self._held.setdefault(owner, [])
            if all(kept != tokens for kept, _ in held):
                held.append((tokens, kv))

    def holds(self, owner: str, tokens: Sequence[int]) -> bool:
        """Whether a KV cache of exactly ``tokens`` is held for ``owner``."""
        tokens = tuple(tokens)
        with self._lock:
            return any(kept == tokens for kept, _ in self._held.get(owner, ()))

    def take(self, owner: str | None, prompt: Sequence[int]) -> tuple[Any, int]:
        """A copy of the longest KV cache held for ``owner`` whose tokens begin ``prompt`` (one token at least left
        to read) and how many it holds; (None, 0) where none does."""
        prompt = tuple(prompt)
        with self._lock:
            fits = [(tokens, kv) for tokens, kv in self._held.get(owner or "", ())
                    if len(tokens) < len(prompt) and prompt[:len(tokens)] == tokens]
            if not fits:
                return None, 0
            tokens, kv = max(fits, key=lambda held: len(held[0]))
        # copied outside the lock: a held cache is never changed once put, and ``release`` (on the event loop)
        # must not wait for a large prompt's copy
        return copy.deepcopy(kv), len(tokens)

    def release(self, owner: str | None) -> None:
        with self._lock:
            self._held.pop(owner or "", None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._held.values())


def _handed_on(prepared: Any) -> bool:
    """Whether a row's prompt is one its request's other rows may take from this one (see the rules)."""
    return prepared.shared and not prepared.image_runs and prepared.req is not None \
        and prepared.req.response_id is not None


def keep_prompt(prompt_cache: Any, handed: HandOffs | None, prepared: Any, tokens: Sequence[int], kv: list,
                more: int) -> bool:
    """``kv`` holds ``tokens``, a row's prompt but its last token: handed to its request's other rows where the
    prompt cache will not hold it, else a checkpoint in the prompt cache where one is wanted (see the rules; True
    when either was made)."""
    if handed is not None and _handed_on(prepared) and prompt_cache is not None \
            and checkpoint.holds(kv, tokens) and not checkpoint.fits(prompt_cache, kv):
        if handed.holds(prepared.req.response_id, tokens):  # (a choice that started from it: no second copy)
            return True
        try:
            handed.put(prepared.req.response_id, tokens, snapshot(kv))
        except Exception:  # (as a checkpoint's: the other choices read the prompt themselves, no more)
            log.exception("a %d-token prompt could not be handed to its request's other choices", len(tokens))
            return False
        log.debug("prompt cache: a %d-token prompt handed to its request's other choices", len(tokens))
        return True
    return checkpoint.keep(prompt_cache, tokens, kv, prepared.image_runs, more, prepared.shared)


def or_handed(handed: HandOffs | None, prepared: Any, kv: Any, n: int) -> tuple[Any, int]:
    """What the prompt cache offers a row (``kv`` holding its prompt's first ``n`` tokens), or what its request's
    first choice handed on, where that holds more (see the rules)."""
    if handed is not None and _handed_on(prepared):
        taken, m = handed.take(prepared.req.response_id, prepared.tokens)
        if m > n:
            return taken, m
    return kv, n
