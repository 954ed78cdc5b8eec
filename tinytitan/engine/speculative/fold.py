"""The drafting part of the decode step's fold (decoder.py ``Scheduler.fold``): what a row's grammar matcher,
seeded sampler and speculator do after a verify, after a drafting step, and when the row steps out of the batch.

Rules:
- A verify (``plan.Verify``) read a draft in one pass and its forward trimmed the row's cache past the rejected
  draft tokens; here the row's grammar matcher is rolled back over them too (llguidance's ``rollback``), its
  seeded sampler's key chain moves on by the rows used (``RowSampler.accept``), and its speculator hears what
  was drafted and accepted — whatever the row's own drafting (a group follower's row applies rank 0's plan).
- A drafting row's tokens are accepted one at a time (what a verify accepted, then the model's own); its
  speculator sees them, and, while the row holds its last token, proposes the draft the next step verifies.
- A row that stepped out of the batch (step.Forward._leave) takes back the batch's step ahead: its matcher
  rolled back by one, its sampler's last draw undone; its speculator catches up with the answer so far and
  drafts again.
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


def fold_drafting(row: "Row", step: RowStep, tokens: tuple[int, ...]) -> bool:
    """A drafting row's tokens of one step (see the rules); True when a token ended the row."""
    spec = row.speculator
    used, ended = 0, False
    for token in tokens:
        used += 1
        if row.accept(token):
            ended = True
            break
    spec.generated(tokens[:used], isinstance(step, Verify))
    if not ended and row.holding:
        row.drafts = spec.draft(row.generated[-1], row.cap_left)
    return ended


def stepped_out(row: "Row") -> None:
    """``row`` left the batch onto its own cache, its last token not read: it drafts again (see the rules).
    Its own grammar failing fails the row, not the step."""
    try:
        mask = row.loop.grammar_mask
        if mask is not None and not mask.failed and mask.started:
            mask.matcher.rollback(1)
        if row.draws is not None:
            row.draws.undo()
        spec = row.speculator
        spec.resume(row.tokens + row.generated)
        row.holding, row.drafts = True, spec.draft(row.generated[-1], row.cap_left)
    except Exception as exc:
        row.fail(exc)
