"""One row's drafting, as the decode step uses it: where its drafts come from, how many, what they earned.

Rules:
- A row speculates when its model's server drafts (prompt lookup unless turned off, or a draft model) and its
  request does not say ``speculative: false``, and its KV cache stays trimmable (no sliding window, no recurrent
  state: a rejected draft is trimmed off; rows.py); it drafts alone and in the batch alike (in a batch whose cache
  cannot hold holes — any layer but a plain KVCache, quantized ones included — it decodes without drafts there).
  Its proposer is its own: prompt lookup over its history, or a draft model's cache taken from the backend's pool
  (``release`` gives it back when the row ends).
- ``expects_draft()`` is asked before the row's pending token is read: when a draft is likely after it, the
  step reads that token without queuing the next forward pass (a draft must be known before the pass that
  verifies it); otherwise the row stays pipelined, as decoding without drafts. Prompt lookup expects one when
  the history's end already has an earlier match; a draft model always (while the policy is on).
- ``draft(last, cap_left)`` is the draft to verify after ``last``: the grammar's forced tokens first when
  there are any (certain: the mask allows nothing else), else the proposer's; at most the policy's k and
  what the output cap leaves after the step's own token; cut where the grammar would refuse it and before
  an end-of-sequence token (verify.usable_draft).
- ``verified(drafted, accepted)`` and ``generated(tokens)`` keep the proposer's history (prompt, then every
  accepted token), the policy and the counts the turn reports (drafted and accepted tokens, steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .lookup import PromptLookup
from .policy import DraftPolicy
from .verify import usable_draft

DRAFT_MODEL_K = 3  # mlx-lm's server default is 3 draft tokens per step for a draft model


@dataclass(frozen=True)
class SpeculativeConfig:
    """How a model's server drafts: prompt lookup (on by default), or a draft model (``--draft-model``),
    with ``num_draft_tokens`` the most tokens drafted per step (None: 16 for lookup, 3 for a draft model)."""
    lookup: bool = True
    draft_model: Path | None = None
    draft_model_name: str | None = None
    num_draft_tokens: int | None = None

    @property
    def on(self) -> bool:
        return self.lookup or self.draft_model is not None


class Speculator:
    def __init__(self, proposer, policy: DraftPolicy, mask=None, eos: Sequence[int] = (), always: bool = False,
                 known: int = 0, release=None):
        self.proposer, self.policy, self.mask = proposer, policy, mask
        self.release = release  # gives a pooled proposer back when the row ends (None: nothing to give back)
        self.known = known  # history tokens the proposer has been given (the prompt, then what was generated)
        self.eos = tuple(eos)
        self.always = always  # a draft model: it always has a guess
        self.drafted_steps = 0

    @classmethod
    def for_lookup(cls, tokens: Sequence[int], k_max: int | None = None, **kw) -> "Speculator":
        return cls(PromptLookup(tokens), DraftPolicy(k_max=k_max or DraftPolicy.k_max), known=len(tokens), **kw)

    @classmethod
    def for_draft_model(cls, proposer, tokens: Sequence[int], k_max: int | None = None, **kw) -> "Speculator":
        k = k_max or DRAFT_MODEL_K
        proposer.reset(tokens)
        return cls(proposer, DraftPolicy(k_max=k, start=k), always=True, known=len(tokens), **kw)

    # -- counts -----------------------------------------------------------------------------------------------
    @property
    def drafted(self) -> int:
        return self.policy.drafted

    @property
    def accepted(self) -> int:
        return self.policy.accepted

    # -- the step's questions ---------------------------------------------------------------------------------
    def expects_draft(self) -> bool:
        if self.policy.k() <= 0:
            return False
        return self.always or bool(self.proposer.propose(1))

    def draft(self, last: int, cap_left: int) -> tuple[int, ...]:
        k = min(self.policy.k(), cap_left - 1)
        if k <= 0:
            return ()
        draft = self._forced(last, k) or self.proposer.propose(k)
        return tuple(usable_draft(list(draft), last, self.mask, self.eos))

    def _forced(self, last: int, k: int) -> list[int]:
        """The tokens the grammar forces after ``last`` (which its mask has not consumed yet)."""
        mask = self.mask
        if mask is None or mask.failed:
            return []
        matcher = mask.matcher
        if mask.started:
            if not matcher.consume_token(last):
                return []
            forced = matcher.compute_ff_tokens()
            matcher.rollback(1)
        else:
            forced = matcher.compute_ff_tokens()
        return [t for t in forced[:k] if t not in self.eos]

    # -- what the fold reports --------------------------------------------------------------------------------
    def verified(self, drafted: int, accepted: int) -> None:
        self.policy.record(drafted, accepted)

    def unused(self, tokens: int) -> None:
        """``tokens`` of the last verify's accepted draft came after the row's end (a stop string): never generated,
        so neither drafted nor accepted in the counts the turn reports."""
        if tokens > 0:
            self.policy.drafted -= tokens
            self.policy.accepted -= tokens

    def generated(self, tokens: Sequence[int], drafted: bool) -> None:
        """Tokens the row accepted (``drafted``: by a step that verified a draft)."""
        self.proposer.extend(tokens)
        self.known += len(tokens)
        if not drafted:
            self.policy.skipped(len(tokens))
