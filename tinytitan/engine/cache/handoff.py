"""A prompt that several rows of one request read (its choices: ``ChatRequest.shared_prompt``), handed from the row
that read it to the others where the prompt cache will not hold it (``--prompt-cache-mib 0``, or a prompt whose KV
cache and answer would not fit the budget together): else the others, which wait for the first to read it, would
read it all again after.

Rules:
- The first row's checkpoint of its prompt (checkpoint.keep: read but for its last token) is held here when the
  prompt cache does not keep it, for its request (``ChatRequest.response_id``) alone, outside the cache's budget.
  Prompts with images are not handed (their keys may stand shifted: the prompt cache turns them back).
- A row of the same request whose prompt it is a prefix of (all but the last token) takes a copy of it where the
  prompt cache offers less (``or_handed``: backends/base.py and vision.py, where a row's cache starts).
- It is dropped when its request has ended (``Engine.release_shared``: the protocol calls it once every choice
  has), so nothing outlives the request that made it; a row that comes after that reads its prompt, no more.
- The model thread adds and takes, the trio side drops: one lock.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Sequence


class HandOffs:
    def __init__(self):
        self._held: dict[str, list[tuple[tuple[int, ...], Any]]] = {}  # request -> (prompt tokens, KV cache)
        self._lock = threading.Lock()

    def put(self, owner: str, tokens: Sequence[int], kv: Any) -> None:
        with self._lock:
            self._held.setdefault(owner, []).append((tuple(tokens), kv))

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
            return copy.deepcopy(kv), len(tokens)

    def release(self, owner: str | None) -> None:
        with self._lock:
            self._held.pop(owner or "", None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._held.values())


HANDED = HandOffs()  # (the process's one: keyed by request ids, which no two requests share)


def or_handed(prepared: Any, kv: Any, n: int) -> tuple[Any, int]:
    """What the prompt cache offers a row (``kv`` holding its prompt's first ``n`` tokens), or what its request's
    first choice handed on, where that holds more (see the rules)."""
    if prepared.shared and not prepared.image_runs and prepared.req is not None:
        handed, m = HANDED.take(prepared.req.response_id, prepared.tokens)
        if m > n:
            return handed, m
    return kv, n
