"""A row: one generation on the model thread, from its first step to its end.

Rules:
- A row is opened (``open``) before its first step: its KV cache starts where its backend's ``start`` says
  (the longest cached prefix of its prompt; a vision model's images read there too), or empty; its sampler
  and logits processors are made (guarded: one that raises marks this row failed, never the step it ran in),
  and its DecodeLoop is started. The cache goes to the forward, which holds it from then on. It drafts (a
  speculator) only where its cache stays trimmable: a rejected draft is trimmed off, which a sliding-window
  layer past its window or a recurrent one cannot do (mlx-lm's own speculative decoding refuses them too).
- ``accept(token)`` hands it one sampled token, as mlx-lm's ``stream_generate`` would report it: the
  end-of-turn token ends it (not content), a client stop string ends it, its output cap ends it (once, here:
  nothing else counts its tokens). What ended it is recorded on the row (``ending``); nothing is sent or
  closed there.
- ``propose()`` is the row's proposer: the tokens it knows come next before the model is asked: the grammar's
  forced run (a JSON document's keys and punctuation: certain, so accepted at once). Its ``speculator``
  (speculative/speculator.py: prompt lookup or a draft model, None when it does not draft) guesses drafts,
  which the step verifies alone or in the batch (step.py; in a batch whose cache cannot hold holes, without).
- ``end()`` is where a generation ends on the model thread, and the only place: what its KV cache holds is
  kept in the prompt cache (with what its request says of its prompt: ``Prepared.cache_facts``), its last
  events go out (Finished; Failed in-band once it started, or the consumer's exception before), and the model
  thread lets go of its session. The decoder calls it when the row leaves its table, which a row does once;
  it records the entry kept (``kept``) and whether the turn ended with no tool call (``final``), which the
  decoder tells the prompt cache (on a group, when rank 0's next message says so: group/lockstep.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..backends.base import Backend
from ..cache.entries import Kept, kv_stays_trimmable
from ..prompt.prepare import Prepared
from .detokenizer import row_detokenizer
from .last_character import without_cut_character
from .logprobs import Figures, prompt_logprobs, prompt_top, token_logprob
from .token_events import DecodeLoop

if TYPE_CHECKING:
    from ..cache.handoff import HandOffs
    from ..session import Mailbox


@dataclass(frozen=True)
class Ending:
    """Why a row ends: it finished (``hit_length``: its cap struck), its consumer left, or it failed."""
    kind: str  # "finished" | "left" | "failed"
    hit_length: bool = False
    error: BaseException | None = None


LEFT = Ending("left")


class Row:
    """One session's generation on the model thread: where its cache stands, what it sampled, how it ended."""

    def __init__(self, backend: Backend, prepared: Prepared, box: "Mailbox | None" = None,
                 loop: DecodeLoop | None = None, should_stop: Callable[[], bool] | None = None,
                 handed: HandOffs | None = None):
        """With ``box`` (a session's mailbox) the row's DecodeLoop emits into it and ``end`` lets go of it;
        without, it reports to ``loop`` (``MLXBackend.decode``) and stops when ``should_stop()`` says so.
        ``handed``: its engine's hand-offs (cache/handoff.py), where its request's choices pass on their prompt
        (None: none are, as for a row no engine opened)."""
        self.backend, self.prepared, self.box, self.handed = backend, prepared, box, handed
        self.loop = loop if loop is not None else box.open_loop(backend.parser(prepared), prepared)
        self._should_stop = should_stop if should_stop is not None else box.stop.is_set
        self.tokens = list(prepared.tokens)
        self.id: int | None = None  # the decoder's number for it (set when it is admitted)
        self.read = 0  # prompt tokens its cache holds (its cache itself is the forward's: step.py)
        self.fetched = False  # its opening asked the prompt cache for its prefix (``start``), failing after or not
        self.pending = False  # a token it sampled is still to be read (the step after it is already queued)
        self.run: tuple[int, ...] = ()  # certain tokens its proposer put forward (accepted), to be fed next
        self.speculator = None  # its drafting (speculative/speculator.py), None when it does not draft
        self.release_draft: Callable[[], None] | None = None  # gives its pooled draft proposer back at its end
        self.holding = False  # its last token was read with nothing queued after it: a draft may follow it
        self.drafts: tuple[int, ...] = ()  # speculative tokens its speculator put forward, verified next (step.py)
        self.sampler: Callable | None = None
        self.draws = None  # its seeded RowSampler (speculative/sampling.py), whose key chain the fold moves
        self.processors: list = []
        self.generated: list[int] = []
        # how many alternatives its prompt tokens' figures list, where asked (a group follower's: rank 0's row's, read
        # alike on every rank: lockstep.py), and those figures (``prompt_read``: sent once its prompt is read)
        self.prompt_top = prompt_top(prepared)
        self.prompt_figures: list | None = [] if self.prompt_top is not None else None
        self.prompt_done = False  # its prompt is read (but the last token) and what follows from that was done
        # it reads its whole prompt itself, no cached prefix (which has no logits for its figures: logprobs.py); a
        # group follower's row as rank 0's does (lockstep.py)
        self.whole_prompt = self.prompt_figures is not None
        self.decoded = 0  # tokens given to the detokenizer (the end-of-turn token is not)
        self.error: Exception | None = None  # raised by its own sampler or logits processor during a step
        self.ending: Ending | None = None
        self.kept: int | None = None  # the prompt cache's key for what its end kept (None: nothing kept)
        self.final = False  # it finished its turn with no tool call (its end says; the decoder tells the cache)
        # mlx-lm's, less its naive one; a raw prompt's, its text verbatim after the prompt's end (detokenizer.py)
        self.detok = row_detokenizer(backend.tokenizer, self.tokens if prepared.raw else None)

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        """Its consumer left."""
        return self._should_stop()

    @property
    def left_to_read(self) -> list[int]:
        return self.tokens[self.read:]

    @property
    def cap_left(self) -> int:
        return self.prepared.max_tokens - self.decoded

    @property
    def held(self) -> list[int]:
        """The tokens its KV cache holds once ``read`` prompt tokens and all but its last sampled token are in."""
        if not self.generated:
            return self.tokens[:self.read]
        return self.tokens + self.generated[:-1]

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def open(self, model, seeded: bool) -> list:
        """Its sampler and processors, its Started; the KV cache it starts from (the longest cached prefix,
        else a new one), for the forward to hold."""
        backend, prepared = self.backend, self.prepared
        since = time.perf_counter()
        kv, read, cached = backend.start(prepared, model, reuse=False) if self.whole_prompt else \
            backend.start(prepared, model, handed=self.handed)
        self.read, self.fetched = read, True
        sampler, processors = backend.sampler_for(prepared, self.loop)
        if not seeded and prepared.seed is not None:
            import mlx.core as mx

            mx.random.seed(int(prepared.seed) % 2**64)  # any integer a client sends (OpenAI takes negative seeds)
        # drafts only where a rejected draft can always be trimmed off its cache (no sliding window, no recurrence),
        # and not where it asks for log probabilities (one sample a token: logprobs.py)
        drafts = kv_stays_trimmable(kv) and prepared.logprobs is None
        self.speculator = backend.speculator(prepared, self.loop, self.tokens) if drafts else None
        self.release_draft = self.speculator.release if self.speculator is not None else None
        # a seeded sampler's key chain: a verify moves it on by the rows used, a leave sets it back (scheduler.py)
        self.draws = sampler if getattr(sampler, "seed", None) is not None else None
        self.sampler, self.processors = self._guarded(sampler, processors)
        ids = prepared.req is not None and prepared.req.prompt_ids is not None  # (its text: the ids decoded)
        self.loop.start(len(self.tokens), cached, since=since, prompt_text=prepared.prompt_text if ids else None)
        return kv

    def prompt_read(self, figures: tuple = ()) -> None:
        """Its prefill read prompt tokens (``figures``: theirs, where it asks). Once its prompt is read but the last
        token (that token's logits are its first sample's): the prompt's figures go out (``PromptLogprobs``, before
        any delta), and a row with no token to generate (``max_tokens`` 0: the prompt's figures alone) ends,
        its cap struck."""
        if self.prompt_done or self.ending is not None:
            return
        if self.prompt_figures is not None:
            self.prompt_figures += figures
        if self.read < len(self.tokens) - 1:
            return
        self.prompt_done = True
        if self.prompt_figures is not None:
            self.loop.prompt_read(prompt_logprobs(self.backend.tokenizer, self.tokens, self.prompt_figures))
            self.prompt_figures = None
        if self.prepared.max_tokens <= 0:
            self.ending = Ending("finished", hit_length=True)

    def accept(self, token: int, figures: "Figures | None" = None) -> bool:
        """One sampled token (``figures``: its log probabilities, where the request asks); True when it ended the
        row (``ending`` says how)."""
        if self.error is not None:
            self.ending = Ending("failed", error=self.error)
            return True
        self.generated.append(token)
        if token in self.backend.tokenizer.eos_token_ids:  # the end-of-turn token: not content
            if figures is not None and prompt_top(self.prepared) is not None:  # listed after the answer's tokens,
                # as OpenAI and vLLM list it beside the prompt's: a client that drops the last entry as the one
                # generated token (lm-evaluation-harness) drops it, not a prompt token
                self.loop.end_token = token_logprob(self.backend.tokenizer, token, figures)
            self.detok.finalize()
            rest = self._whole(self.detok.last_segment)  # (read once: reading it moves its offset on)
            if rest:
                self.loop.parser_text(rest)
            self.ending = Ending("finished")
            return True
        self.detok.add_token(token)
        self.decoded += 1
        last = self.decoded >= self.prepared.max_tokens
        if last:
            self.detok.finalize()
        text = self.detok.last_segment
        if last:
            text = self._whole(text)
        logprob = token_logprob(self.backend.tokenizer, token, figures) if figures is not None else None
        if not self.loop.token(text, logprob):  # a client stop string, or the last tool call the turn allows
            self.ending = Ending("finished")
        elif last:
            self.ending = Ending("finished", hit_length=True)
        return self.ending is not None

    def report_drafts(self) -> None:
        """What its drafts earned, for the turn's timing (drafted and accepted tokens)."""
        if self.speculator is not None:
            self.loop.draft_tokens += self.speculator.drafted
            self.loop.draft_accepted_tokens += self.speculator.accepted
            self.speculator = None

    def fail(self, exc: BaseException) -> None:
        if self.ending is None or self.ending.kind != "failed":
            self.ending = Ending("failed", error=exc)

    def flush(self) -> None:
        """It ends: what it sent goes out now, not after the work of ending it (``DecodeLoop.ending``)."""
        self.loop.ending()

    def end(self, kv: list | None = None, like: Kept | None = None) -> None:
        """The one place a generation ends on the model thread (see the rules above); ``kv``: the KV cache the
        forward gave back (None: none to keep); ``like``: what rank 0 kept of it (a group follower's row)."""
        ending = self.ending or Ending("failed", error=RuntimeError("the decoder let go of it unfinished"))
        try:
            if ending.kind == "failed":
                self._report(ending.error)
            else:
                try:
                    self.kept = self._store(kv, like)
                except Exception:  # the answer is whole: a prefix not kept costs a later turn a re-read, no more
                    logging.getLogger("tinytitan.engine").exception("the prompt cache could not keep a prefix")
                if ending.kind == "finished":
                    if self.speculator is not None or self.loop.draft_tokens:
                        self.report_drafts()
                    self.loop.end(ending.hit_length)
                    self.final = not self.loop.parser.tool_calls
        finally:
            if self.release_draft is not None:  # a pooled draft-model proposer goes back to its backend
                self.release_draft, release = None, self.release_draft
                release()
            if self.box is not None:
                self.box.close(None if self.loop.started else ending.error)

    def _store(self, kv: list | None, like: Kept | None = None) -> int | None:
        """Keep what its KV cache holds for the requests after it (a prompt whose client left half-way is
        half-read already when it comes again). A cache taken out of the batch is a lazy slice of the batch's:
        evaluated here, so the entry owns its memory and no pending work of this thread's stream travels with
        it."""
        if kv is None:
            return None
        import mlx.core as mx

        from ..cache.entries import kv_offset, kv_trimmable

        # a verified draft whose later tokens went unused (a stop string, the cap): the cache forgets them (a group
        # follower: those past what rank 0 kept, whose stop string it does not see)
        held = len(self.tokens) + len(self.generated) if like is None else like.tokens
        extra = (kv_offset(kv) or 0) - held
        if extra > 0 and kv_trimmable(kv):
            for c in kv:
                c.trim(extra)
        mx.eval([c.state for c in kv if not c.empty()])
        return self.backend.prompt_cache.store((self.tokens + self.generated)[:held], kv, self.prepared.image_runs,
                                               facts=self.prepared.facts(), like=like)

    def _report(self, exc: BaseException | None) -> None:
        """A failure: before its Started (its model would not load) the consumer's exception, as when decoding
        one at a time (``end`` hands it over); after, in-band (its stream may be open)."""
        if self.loop.started and not self.stopped and not self.loop.finished:
            try:  # the text its detokenizer still held goes out first, as it would at any other end
                self.detok.finalize()
                rest = self._whole(self.detok.last_segment)
                if rest:
                    self.loop.parser_text(rest)
            except Exception:
                pass
            logging.getLogger("tinytitan.engine").error("generation failed: %s", exc)
            self.loop.fail(exc)

    def _whole(self, text: str) -> str:
        """The last piece of its answer less a character its end cut (last_character.py)."""
        return without_cut_character(text, self.generated[:self.decoded], self.backend.tokenizer,
                                     getattr(self.backend, "vocab_size", None))

    # -- the proposer -------------------------------------------------------------------------------------------
    def propose(self) -> tuple[int, ...]:
        """The tokens the row knows come next: its grammar's forced run, when at least two tokens in a row are
        forced (a run of one saves nothing: the next regular step reads it). They are read in one forward
        pass; the sampler still draws once per token (the step does, on one-hot distributions: the forced
        token), so a seeded request draws what it draws decoding token by token. The matcher is left before the run's
        last token, which the mask's next call consumes as usual. The run's first token was drawn already (by
        the step that computed its mask), and is what that step sampled."""
        mask = self.loop.grammar_mask
        if mask is None or self.prepared.logprobs is not None:  # (its forced tokens are sampled: logprobs.py)
            return ()
        run: list[int] = []
        forced = mask.forced()
        while forced is not None and len(run) < self.cap_left:
            run.append(forced)
            mask.advance(forced)
            forced = mask.forced()
        if run:
            mask.matcher.rollback(1)
        if len(run) == 1:
            run = []
        return tuple(run)

    # -- guards -------------------------------------------------------------------------------------------------
    def _guarded(self, sampler, processors: list) -> tuple[Any, list]:
        """Its sampler and logits processors, run inside a step shared with others: one that raises marks this
        row failed (it leaves after the step) instead of breaking the step for everyone."""
        from mlx_lm.sample_utils import greedy_sampler

        def processed(tokens, logits):
            try:
                for processor in processors:
                    logits = processor(tokens, logits)
            except Exception as exc:
                self.error = self.error or exc
            return logits

        def sample(logprobs):
            try:
                return sampler(logprobs)
            except Exception as exc:
                self.error = self.error or exc
                return greedy_sampler(logprobs)

        # the shared greedy sampler stays as it is: rows that all use it are sampled in one call
        return (sampler if sampler is greedy_sampler else sample), ([processed] if processors else [])
