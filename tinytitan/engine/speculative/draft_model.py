"""A draft model: a small model's greedy guesses, verified by the served model like any other draft.

Rules:
- A draft model is admitted only when its tokenizer agrees with the served model's: the same token for
  every id (the same vocabulary, the same ids) and the same ids for a probe text. Otherwise it is refused,
  naming ``--draft-model`` and what differs: a draft in another tokenizer's ids would be verified as
  nonsense. So is one whose KV cache cannot always be trimmed back (sliding-window or recurrent layers): its
  rejected guesses would stay in it. (A served model's row drafts only on such a cache too: rows.py.)
- The proposer keeps one KV cache of the draft model's own. Before each proposal it follows the history by
  their longest common prefix (trimmed back past a rejected draft, extended by the tokens that came since),
  so one proposer serves request after request and reuses what it read of the last one. One request drafts
  at a time (a row stepping alone); one that drafts again after decoding in the batch hands it its whole
  history (``follow``): another request may have had it meanwhile.
- Guesses are greedy (the draft's own argmax): the verify step, not the draft, keeps the output exact.
- A proposal reads at most ``prefill_step`` tokens of history before guessing: a long prompt is read one chunk
  a proposal, with no draft until it is in (the row decodes on without drafts meanwhile). So a step that asks
  for a draft takes no longer than one prompt chunk of the draft model's, as the served model's own prompt is
  read a chunk a step: the batch's other rows wait no longer, and a group's watchdog, which times each step
  (group/lockstep.py), is not tripped by a draft model reading a long prompt on rank 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ...errors import LOAD_ERRORS

PROBE = "def f(x):\n    return {'a': [1, 2.5, \"three\"]}  # Größe, naïve — ok?\n\tdone <tag/>"


class DraftModelRefused(ValueError):
    """The draft model cannot draft for the served model; the message says why."""


def tokenizer_mismatch(model_tokenizer, draft_tokenizer) -> str | None:
    """Why ``draft_tokenizer`` cannot draft for ``model_tokenizer`` (mlx-lm TokenizerWrappers or HF
    tokenizers), or None when they agree."""
    want, have = model_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if want != have:
        moved = sorted(t for t, i in want.items() if have.get(t) != i)
        extra = sorted(set(have) - set(want))
        parts = []
        if moved:
            parts.append(f"{len(moved)} of the model's {len(want)} tokens have another id or none there "
                         f"(e.g. {moved[0]!r})")
        if extra:
            parts.append(f"{len(extra)} tokens the model does not have (e.g. {extra[0]!r})")
        return "; ".join(parts)
    if model_tokenizer.encode(PROBE) != draft_tokenizer.encode(PROBE):
        return "the same vocabulary splits text differently"
    return None


def load_draft_model(path: str | Path, model_tokenizer, name: str | None = None):
    """The draft model in mlx-lm directory ``path`` (what ``--draft-model`` resolved to), after the tokenizer
    check; DraftModelRefused naming it otherwise."""
    from mlx_lm.utils import load_model, load_tokenizer

    path = Path(path)
    name = name or str(path)
    try:
        tokenizer = load_tokenizer(path)
    except LOAD_ERRORS as exc:  # missing or damaged tokenizer files
        raise DraftModelRefused(f"--draft-model {name}: cannot load its tokenizer from {path}: "
                                f"{type(exc).__name__}: {exc}") from exc
    why = tokenizer_mismatch(model_tokenizer, tokenizer)
    if why is not None:
        raise DraftModelRefused(f"--draft-model {name}: its tokenizer does not agree with the model's: {why}")
    try:
        model, _ = load_model(path)
    except LOAD_ERRORS as exc:  # missing or damaged weights …
        raise DraftModelRefused(f"--draft-model {name}: cannot load it from {path}: {type(exc).__name__}: "
                                f"{exc}") from exc
    from mlx_lm.models.cache import make_prompt_cache

    from ..cache.entries import kv_stays_trimmable

    if not kv_stays_trimmable(make_prompt_cache(model)):
        raise DraftModelRefused(f"--draft-model {name}: its KV cache cannot always be trimmed back (sliding-window "
                                "or recurrent layers): guesses it must take back would stay in it")
    return model


class DraftModelProposer:
    """Proposals from a draft model, over a history that grows (``reset`` for a new request's prompt)."""

    def __init__(self, model, tokens: Iterable[int] = (), prefill_step: int = 2048):
        from mlx_lm.models.cache import make_prompt_cache

        self.model, self.prefill_step = model, prefill_step
        self.kv = make_prompt_cache(model)
        self.held: list[int] = []  # the tokens the draft's cache holds
        self.tokens: list[int] = list(tokens)

    def reset(self, tokens: Iterable[int]) -> None:
        """A new history (the next request's prompt); what the cache holds of it is kept."""
        self.tokens = list(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        self.tokens.extend(int(t) for t in tokens)

    def _follow(self) -> list[int]:
        """Trim the cache to its common prefix with the history (at least one history token left to feed);
        the tokens to feed."""
        from mlx_lm.models.cache import trim_prompt_cache

        limit = min(len(self.held), len(self.tokens) - 1)
        common = 0
        while common < limit and self.held[common] == self.tokens[common]:
            common += 1
        if len(self.held) > common:
            trim_prompt_cache(self.kv, len(self.held) - common)
            del self.held[common:]
        return self.tokens[common:]

    def propose(self, k: int) -> list[int]:
        import mlx.core as mx

        if k <= 0 or not self.tokens:
            return []
        feed = self._follow()
        read = min(len(feed) - 1, self.prefill_step)  # all but the last token, one chunk at most (see the rules)
        if read > 0:
            self.model(mx.array(feed[:read])[None], cache=self.kv)
            mx.eval([c.state for c in self.kv])
        if read < len(feed) - 1:  # a long prompt: no draft until it is in
            self.held = self.tokens[:len(self.held) + read]
            return []
        y = mx.array(feed[-1:])
        guesses = []
        for _ in range(k):
            y = mx.argmax(self.model(y[None], cache=self.kv)[0, -1:], axis=-1)
            mx.async_eval(y)
            guesses.append(y)
        draft = mx.concatenate(guesses).tolist()
        self.held = self.tokens + draft[:-1]  # every guess but the last was fed back
        return draft


class DraftModelPool:
    """The draft model's proposers, one per request drafting now (rows drafting side by side in the batch each
    keep their own draft cache); a request takes the free one whose cache holds most of its prompt (an
    agent's next turn finds its conversation there), else a new one over the same weights."""

    def __init__(self, model):
        self.model = model
        self.free: list[DraftModelProposer] = [DraftModelProposer(model)]

    def take(self, tokens: list[int]) -> DraftModelProposer:
        def shared(p: DraftModelProposer) -> int:
            n = 0
            for a, b in zip(p.held, tokens):
                if a != b:
                    break
                n += 1
            return n

        if not self.free:
            return DraftModelProposer(self.model)
        best = max(self.free, key=shared)
        self.free.remove(best)
        return best

    def give_back(self, proposer: DraftModelProposer) -> None:
        if proposer not in self.free:
            self.free.append(proposer)
