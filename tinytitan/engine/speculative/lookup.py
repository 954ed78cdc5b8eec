"""Prompt lookup: draft tokens guessed from the longest earlier match of the last few tokens.

Rules:
- The history is the prompt's tokens and then the answer's, one list that only grows (``extend``; ``follow``
  catches up with a history that went on without it: a row's answer while it decoded in the batch).
- ``propose(k)`` looks for the last ``n`` tokens of the history earlier in it, ``n`` from ``max_ngram`` down to
  ``min_ngram`` (the longest match wins; of equally long ones, the latest), and proposes the ``k`` tokens
  that followed it. A continuation that runs into the end of the history goes on with its own tokens (a
  repeating run is proposed as repeating on).
- Every ``n``-gram maps to where its latest continuation starts, so a proposal costs
  ``max_ngram - min_ngram + 1`` dictionary look-ups whatever the history's length. The index catches up with
  the history when a proposal is asked for, not as tokens arrive: a row's prompt (20,000 tokens of an agent's:
  30 ms on 2 cores) is indexed after its first token, not before its first forward pass. Built in one go or
  token by token, the index is the same.
"""

from __future__ import annotations

from typing import Iterable

MIN_NGRAM = 2
MAX_NGRAM = 4


class PromptLookup:
    def __init__(self, tokens: Iterable[int] = (), min_ngram: int = MIN_NGRAM, max_ngram: int = MAX_NGRAM):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram sizes {min_ngram}..{max_ngram}: need 1 <= min <= max")
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.tokens: list[int] = []
        # _index[n - min_ngram]: n-gram -> where the token after its latest occurrence is
        self._index: list[dict[tuple[int, ...], int]] = [{} for _ in range(min_ngram, max_ngram + 1)]
        self._indexed = 0  # the history's tokens the index has caught up with
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        self.tokens.extend(map(int, tokens))

    def _catch_up(self) -> None:
        """Index the n-grams that end before each position from ``_indexed`` on (later positions overwrite
        earlier ones: the latest occurrence wins, as token by token)."""
        seq, end = self.tokens, len(self.tokens)
        for n, index in enumerate(self._index, self.min_ngram):
            first = max(self._indexed, n)  # position i continues the n-gram seq[i - n:i]
            if first < end:
                grams = zip(*(seq[first - n + j:end - n + j] for j in range(n)))
                index.update(zip(grams, range(first, end)))
        self._indexed = end

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the longest earlier match of the history's end (empty: no match)."""
        seq = self.tokens
        if k <= 0:
            return []
        if self._indexed < len(seq):
            self._catch_up()
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            start = self._index[n - self.min_ngram].get(tuple(seq[-n:]))
            if start is not None:
                draft: list[int] = []
                for j in range(k):  # past the history's end the continuation is the draft itself
                    at = start + j
                    draft.append(seq[at] if at < len(seq) else draft[at - len(seq)])
                return draft
        return []
