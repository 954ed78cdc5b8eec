"""The drafting part of the decode step's fold (scheduler.py ``Scheduler.fold``): what a row's grammar matcher,
seeded sampler and speculator do after a verify and after a drafting step, alone or in the batch alike.

Rules:
- A verify (``plan.Verify``) read a draft in one pass and its forward trimmed the row's cache past the rejected
  draft tokens; here the row's grammar matcher is rolled back over them too (llguidance's ``rollback``), its
  seeded sampler's key chain moves on by the rows used (``RowSampler.accept``), and its speculator hears what
  was drafted and accepted — whatever the row's own drafting (a group follower's row applies rank 0's plan).
- A drafting row's tokens are accepted one at a time (what a verify accepted, then the model's own); its
  speculator sees them (accepted draft tokens past the token that ended the row — a stop string inside the
  draft — are taken off its counts: the turn counts an accepted token only as it is generated), and, while
  the row holds its last token, proposes the draft the next step verifies (handed back to the fold, which
  stores it on the row: nothing here writes a row's fields).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..decode.plan import RowStep, Verify

if TYPE_CHECKING:
    from ..decode.rows import Row


def verified(row: "Row", step: Verify, accepted: int) -> None:
    """After a verify that accepted ``accepted`` of its draft tokens (see the rules)."""
    rejected = len(step.drafts) - accepted
    mask = row.loop.grammar_mask
    if rejected and mask is not None and not mask.failed:
        mask.matcher.rollback(rejected)
    if row.draws is not None:
        row.draws.accept(accepted + 1)
    if row.speculator is not None:
        row.speculator.verified(len(step.drafts), accepted)


def fold_drafting(row: "Row", step: RowStep, tokens: tuple[int, ...]) -> tuple[bool, tuple[int, ...] | None]:
    """A drafting row's tokens of one step (see the rules): True when a token ended the row; the draft the next
    step verifies where the row holds its last token (None: none asked for; the fold stores it on the row)."""
    spec = row.speculator
    used, ended = 0, False
    for token in tokens:
        used += 1
        if row.accept(token):
            ended = True
            break
    spec.generated(tokens[:used], isinstance(step, Verify))
    if ended and isinstance(step, Verify):  # accepted draft tokens past its end (a stop string): never generated
        spec.unused(max(0, len(tokens) - 1 - used))
    if not ended and row.holding:
        return False, spec.draft(row.generated[-1], row.cap_left)
    return ended, None
