"""How many tokens to draft next, for one request: adaptive k and the off-switch.

Rules:
- ``k()`` is the draft length for the next step: 0 while drafting is off. It starts at ``start`` and moves
  with what the last verify showed: every draft token accepted doubles it (up to ``k_max``); a rejection
  sets it to one more than the tokens that were accepted (at least ``k_min``). A copy runs long, and k
  follows it; a phrase that matched by chance costs one short draft.
- Off-switch: over the last ``window`` steps that drafted, when the accepted share of the drafted tokens is
  below ``pays_above`` (a verify then costs more than the tokens it saves), drafting is off for
  ``cooldown`` generated tokens, doubling (up to ``max_cooldown``) each time it is switched off again; then
  it is tried once more. A request that copies nothing pays for a window now and then, nothing more.
- ``acceptance()``: accepted ÷ drafted over the last ``window`` verifies (with a prior of one accepted in
  two), what the batch expects the next draft's tokens to earn (batch_width.py): a copy comes in runs, so the
  verifies just past say more than the whole turn does.
- Counts for observability: ``drafted`` and ``accepted`` tokens, ``steps`` that drafted.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

K_START = 4
K_MIN = 1
K_MAX = 16
WINDOW = 6
PAYS_ABOVE = 0.25
COOLDOWN = 16
MAX_COOLDOWN = 512


@dataclass
class DraftPolicy:
    k_max: int = K_MAX
    k_min: int = K_MIN
    start: int = K_START
    window: int = WINDOW
    pays_above: float = PAYS_ABOVE
    cooldown: int = COOLDOWN
    max_cooldown: int = MAX_COOLDOWN
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    _k: int = field(default=0, init=False)
    _off_for: int = field(default=0, init=False)  # generated tokens to go before drafting is tried again
    _next_cooldown: int = field(default=0, init=False)
    _recent: collections.deque = field(default=None, init=False, repr=False)  # the off-switch's window
    _lately: collections.deque = field(default=None, init=False, repr=False)  # acceptance()'s window

    def __post_init__(self):
        self.start = max(self.k_min, min(self.start, self.k_max))
        self._k = self.start
        self._next_cooldown = self.cooldown
        self._recent = collections.deque(maxlen=self.window)
        self._lately = collections.deque(maxlen=self.window)

    @property
    def off(self) -> bool:
        return self._off_for > 0

    def k(self) -> int:
        return 0 if self._off_for > 0 else self._k

    def acceptance(self) -> float:
        """Accepted ÷ drafted over the last ``window`` verifies, with a prior of one accepted in two."""
        return (sum(a for _, a in self._lately) + 1) / (sum(d for d, _ in self._lately) + 2)

    def pause(self) -> None:
        """Its draft was not verified (the batch found it too dear): off for ``cooldown`` generated tokens."""
        self._off_for = max(self._off_for, self.cooldown)

    def skipped(self, tokens: int = 1) -> None:
        """``tokens`` were generated without a draft (off, or nothing to propose)."""
        self._off_for = max(0, self._off_for - tokens)

    def record(self, drafted: int, accepted: int) -> None:
        """A verify of ``drafted`` tokens accepted the first ``accepted`` of them."""
        if drafted <= 0:
            return
        self.drafted += drafted
        self.accepted += accepted
        self.steps += 1
        self._k = min(self.k_max, self._k * 2) if accepted == drafted else max(self.k_min, accepted + 1)
        self._recent.append((drafted, accepted))
        self._lately.append((drafted, accepted))
        if len(self._recent) == self.window:
            total = sum(d for d, _ in self._recent)
            if sum(a for _, a in self._recent) < self.pays_above * total:
                self._off_for = self._next_cooldown
                self._next_cooldown = min(self.max_cooldown, self._next_cooldown * 2)
                self._recent.clear()
                self._k = self.start
            elif sum(a for _, a in self._recent) >= 0.5 * total:
                self._next_cooldown = self.cooldown  # it pays again: a later lull starts from a short pause
