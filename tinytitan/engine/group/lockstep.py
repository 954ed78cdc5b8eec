"""Lockstep decoding: every rank of a group runs the same decode steps; rank 0 decides each one.

Rules:
- Rank 0's scheduler (``LeadScheduler``) plans each step as on one machine; before the forward it broadcasts
  one message (``Group.share``) saying everything a follower needs to run that forward identically:
  ``a`` — the tokens rank 0's fold accepted for each row since the last message (a forced run included):
  each follower's own fold must have accepted the same (see the divergence rule below),
  ``e`` — the rows rank 0 retired since, in its order: how each ended, whether its turn ended with no tool call
  (what only rank 0's parser knows), and what its prompt-cache entry holds (``Kept``: ids and bytes; 0 ids:
  none). A follower retires them then, in that order (``settle``), and so stores their entries in the order rank
  0 stored them, each holding the same ids counted at rank 0's size (cache/memory.py);
  then every rank marks the entries of those turns final answers' (``PromptCache.answered_finally``), rank 0
  as it sends, a follower as it reads: each before the same step,
  ``f`` — a fresh decoder (rank 0 made a new forward: its row numbers start again),
  ``j`` — the rows that join: their prompt token ids, cap, sampling values (penalties included), seed, the grammar
  (llguidance's text: a structured output or a forced tool call), the prefix length rank 0 took from its
  prompt cache, and what the entry the row stores will know of its request (``PromptFacts``: its prompt's length,
  the part a later turn repeats, the request's fingerprint): so every rank's prompt cache decides alike which
  entries a new one supersedes (cache/memory.py). A row that failed on rank 0 after its opening took its prefix
  from the prompt cache (its sampler or processors could not be made, say) joins too, marked failed: a follower
  opens it as far as it goes (taking the same entry) and retires it at once, keeping nothing, as rank 0 did
  (such rows may ride on a switch of models, ``m``: a follower opens them on the old model first); a row that
  reads its whole prompt for its tokens' log probabilities says so: every rank reads its prefill's logits (their
  collectives, a pipeline's gather after the last layer, run alike),
  ``p`` — the plan (``Plan.as_ints()``); a message without it (the last rows left) only settles the rows.
- A follower (``follow``, follower.py) holds the same rows, opened from those messages with the same seeds, and runs
  ``Forward.run`` on the same plan: the model's collectives (tensor or pipeline parallel) pair up because
  every rank runs the same forwards in the same order. It applies each result with the fold rank 0 runs
  (``Scheduler.fold``: the tokens accepted, the grammar's forced runs proposed, drafts verified, the end of
  the turn and the cap), so its rows hold what rank 0's hold; what only rank 0 sees (a stop string in the
  text, a failure of its parser) ends the row there. A row this fold ends stays in the table until rank 0's
  message retires it (``e``, ``FollowerScheduler.settle``), as one rank 0 ended alone does. A follower never
  renders a template or parses an answer. Each row's own sampler runs on every rank, on logits the ranks share
  (an all_sum gives each rank the same sum), so the token a pipelined step feeds next is the same everywhere.
  A row without a seed gets one from rank 0 at joining, so random sampling agrees too.
- A rank that dies mid-collective can leave rank 0 waiting in it for good (the ring backend fails its pending
  work, yet the wait may never return), and one that stops answering always does. A watchdog (``Lead.watch``) sees
  a step (or a heartbeat, a switch of models) in flight longer than ``timeout`` seconds, or ``timeout`` for each
  ``PREFILL_STEP`` tokens a step reads (a burst of long prompts reads a chunk of each in one step: on a large
  model that is minutes of work on every rank, not a lost one): the group is broken, and
  the watchdog asks; the fold ends. Rows end only on the model thread, in the fold for those in flight
  (scheduler.py), which may never come back from the collective: so for each row in flight, being opened or
  waiting to join, the watchdog ends its consumer's side instead (``Mailbox.abandon``: the failure in-band, or the
  consumer's exception before its Started; its place given back), again while the model thread stays stuck (a
  request let in just before the break). Should the model thread come back, its next step sees the group broken
  and the fold ends every row as for any broken step; what those rows send then is dropped, so a consumer sees one
  ending.
- Idle, a follower would wait in the collective for the next message, and MLX's ring backend spins while it
  waits (a core's worth). So while no scheduler runs, rank 0 broadcasts a heartbeat every ``IDLE_S`` on its
  model thread (``i``: the pause), and each follower sleeps that long after one before it enters the next
  collective: the two arrive together, and neither spins for more than the jitter. A request arriving in a
  pause waits for the followers to wake: at most ``IDLE_S``, half of it on average, before its first step.
  A heartbeat is a collective like a step's, so a rank lost while idle breaks the group then (``/health``).
- Each follower checks its own sampled tokens against those rank 0 accepted (a row's sampler and grammar run on
  every rank): a difference (a host whose copy of the model differs, say) is a divergence, which it reports in
  its next broadcast (``Group.share``'s report) before it stops; rank 0 breaks the group, naming it.
- A follower whose prompt cache would start a row elsewhere than rank 0's did has diverged: it stops, and rank
  0 sees the group broken (a peer lost) rather than decoding on from different caches.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable

from ..cache.entries import Kept
from ..decode.scheduler import Scheduler
from .ranks import Group, GroupBroken
from ..model_thread import Parked
from ..decode.rows import Row
from ..decode.step import PREFILL_STEP, Plan

log = logging.getLogger("tinytitan.lockstep")

IDLE_S = 0.01  # the pause between idle heartbeats (see the rules): a new request's first step waits up to this


def step_allowance(tokens: int, timeout: float) -> float:
    """How long a step that reads ``tokens`` may take, on every rank (see the rules): ``timeout`` for each
    ``PREFILL_STEP`` tokens, at least once."""
    return timeout * max(1.0, tokens / PREFILL_STEP)


class Lead:
    """Rank 0's side: what its schedulers have accepted and retired since the last broadcast (kept across
    schedulers: the decoder makes a new one each time it starts)."""

    def __init__(self, group: Group, timeout: float = 60.0, idle_s: float = IDLE_S):
        self.group = group
        self.timeout = timeout
        self.idle_s = idle_s
        self.heartbeats = 0
        self.busy_since: float | None = None  # when the step in flight began (monotonic)
        self.busy_with = "a decode step"  # what is in flight, for the watchdog's message
        self.allowed = timeout  # how long it may take (see the rules)
        # the rows whose consumers the watchdog tells (see the rules): the running scheduler's, the one it is
        # opening (its model may be switching), and the decoder's not taken in yet
        self.rows: dict[int, Row] = {}
        self.opening: Row | None = None
        self.waiting: Callable[[], list[Row]] = list
        self.accepted: dict[int, list[int]] = {}
        self.ended: list[list] = []
        self.finals: list[tuple[Any, int]] = []  # (prompt cache, key) of the final answers in ``ended``
        self.joined: list[dict] = []
        self.fresh = False
        self.steps = 0
        self.batch_steps = 0  # steps in which the batch stepped (rows decoding together)
        self.step_s = 0.0  # whole steps (broadcast, forward, fold), for the broadcast's share

    def scheduler(self, load: Callable[[Any], float | None], max_batch: int, first_chunk: int,
                  seeded: bool) -> "LeadScheduler":
        scheduler = LeadScheduler(self, load, max_batch, first_chunk, seeded)
        self.rows = scheduler.rows
        return scheduler

    def send(self, plan: Plan | None, seeded: bool, idle: float | None = None, model: str | None = None) -> None:
        msg: dict[str, Any] = {"a": [[i, t] for i, t in self.accepted.items()], "e": self.ended, "s": seeded}
        if idle is not None:
            msg["i"] = idle
        if model is not None:
            msg["m"] = model
        if self.fresh:
            msg["f"] = 1
        if self.joined:
            msg["j"] = self.joined
        if plan is not None:
            msg["p"] = plan.as_ints()
            self.batch_steps += bool(plan.batch)
        finals, self.finals = self.finals, []
        self.accepted, self.ended, self.joined, self.fresh = {}, [], [], False
        for cache, key in finals:  # as the followers do when they read this message (see the rules)
            cache.answered_finally(key)
        self.group.share(msg, counted=idle is None)

    def busy(self, what: str, plan: Plan | None = None) -> None:
        """``what`` is in flight from now: the watchdog allows it ``timeout``, or that for each ``PREFILL_STEP``
        tokens the ``plan`` reads (see the rules)."""
        tokens = plan.tokens if plan is not None else 0  # (a sum over the plan's steps: once)
        self.busy_with = what if tokens <= PREFILL_STEP else f"{what} reading {tokens} tokens"
        self.allowed = step_allowance(tokens, self.timeout)
        self.busy_since = time.monotonic()

    def switch(self, model_id: str) -> None:
        """Before rank 0 loads ``model_id`` (on the model thread, no rows in flight): every rank loads its part."""
        self.busy("a switch of models")
        try:
            self.send(None, False, model=model_id)
        finally:
            self.busy_since = None

    def watch(self, model_thread=None) -> None:
        """Start the watchdog thread, and the idle heartbeats on ``model_thread`` (see the rules)."""
        threading.Thread(target=self._watch, name="tinytitan-group-watchdog", daemon=True).start()
        if model_thread is not None and self.idle_s > 0:
            threading.Thread(target=self._heartbeats, args=(model_thread,), name="tinytitan-group-heartbeat",
                             daemon=True).start()

    def _heartbeats(self, model_thread) -> None:
        """A heartbeat ``idle_s`` after the last, each a job of the model thread: its collectives all run
        there, in one order, and one job at a time, so a heartbeat runs only while no decode loop does (one
        queued behind a loop runs when it ends: idle then)."""
        done = threading.Event()
        while self.group.broken is None:
            time.sleep(self.idle_s)
            done.clear()
            try:
                model_thread.start_soon(self._heartbeat, lambda _outcome: done.set())
            except Parked:  # the process is exiting
                return
            done.wait()

    def _heartbeat(self) -> None:
        if self.group.broken:
            return
        self.busy("an idle heartbeat")
        try:
            self.send(None, False, idle=self.idle_s)
            self.heartbeats += 1
        except GroupBroken:
            pass  # the group says why; the next request is refused with it
        finally:
            self.busy_since = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            since, allowed = self.busy_since, self.allowed
            if since is None or time.monotonic() - since <= allowed:
                if self.group.broken is not None:
                    return  # and the model thread is not stuck: it ends its rows itself (see the rules)
                continue
            if self.group.broken is None:
                others = "rank 1" if self.group.size == 2 else f"one of ranks 1-{self.group.size - 1}"
                self.group.fail(f"{others} died or stopped answering: {self.busy_with} waited {allowed:g}s for it",
                                list(range(1, self.group.size)))
            self.ask_to_end(GroupBroken(self.group.broken))

    def ask_to_end(self, error: GroupBroken) -> None:
        """The model thread is stuck: each row's consumer ends with ``error`` now; the row itself ends in the
        fold, if the model thread comes back (see the rules)."""
        # the model thread's own table, read from this thread: one copy made in C with the GIL held throughout
        # (CPython with the GIL), so a row the fold retires meanwhile cannot break it off half-way
        rows = [*self.rows.values(), self.opening, *self.waiting()]
        for row in rows:
            if row is not None and row.box is not None:
                row.box.abandon(error)

    def share_of_step(self) -> float:
        return self.group.share_s / self.step_s if self.step_s else 0.0


def join_spec(row: Row) -> dict:
    p = row.prepared
    return {"id": row.id, "tokens": row.tokens, "max_tokens": p.max_tokens, "sampling": p.sampling,
            "seed": p.seed, "speculative": p.speculative, "raw": p.raw, "cached": row.read, "logprobs": p.logprobs,
            "whole_prompt": row.whole_prompt, "prompt_logprobs": row.prompt_top,
            "grammar": p.grammar.text if p.grammar is not None else None,
            "grammar_name": p.grammar.name if p.grammar is not None else None,
            "facts": p.facts().as_json()}


class LeadScheduler(Scheduler):
    """The decoder's scheduler on rank 0: the same plan and fold, with the step's message broadcast before
    every forward (see the rules)."""

    def __init__(self, lead: Lead, *args):
        super().__init__(*args)
        self.lead = lead
        self.announced: set[int] = set()

    def admit(self, row: Row) -> None:
        if row.prepared.seed is None:  # every rank draws alike (see the rules)
            row.prepared.seed = random.getrandbits(63)
        forward = self.forward
        self.lead.opening = row  # loading its model may switch every rank's (see the rules)
        try:
            super().admit(row)
        finally:
            self.lead.opening = None
        if self.forward is not forward:
            self.lead.fresh = True
        if row.id is not None and row.id in self.rows:
            self.announced.add(row.id)
            self.lead.joined.append(join_spec(row))
        elif row.fetched:  # it failed after asking the prompt cache (which may have handed an entry over): the rules
            self.lead.joined.append({**join_spec(row), "failed": 1})

    def retire(self, row: Row, like: Kept | None = None) -> None:
        announced = row.id in self.announced
        self.announced.discard(row.id)
        finals = len(self.lead.finals)
        try:
            super().retire(row, like)
        finally:
            if announced:
                kind = row.ending.kind if row.ending is not None else "failed"
                kept = row.backend.prompt_cache.kept(row.kept)  # (0 ids where it kept none)
                self.lead.ended.append([row.id, kind, int(len(self.lead.finals) > finals), kept.tokens,
                                        kept.nbytes])

    def answered(self, row: Row) -> None:
        """Its entry is marked a final answer's when the next message says so, on every rank (see the rules)."""
        if row.final and row.kept is not None:
            self.lead.finals.append((row.backend.prompt_cache, row.kept))

    def step(self, others_waiting: Callable[[], bool]) -> None:
        group = self.lead.group
        if group.broken:
            raise GroupBroken(group.broken)
        started = time.perf_counter()
        self.lead.busy("a decode step")
        try:
            super().step(others_waiting)
        except RuntimeError as exc:  # a collective inside the model (or a cache it left) failed: a rank is gone
            if not isinstance(exc, GroupBroken) and group.lost(exc):
                raise GroupBroken(group.broken) from exc
            raise
        finally:
            self.lead.busy_since = None
        self.lead.steps += 1
        self.lead.step_s += time.perf_counter() - started

    def advance(self, plan: Plan) -> None:
        """The step's message goes out before the forward; the fold, then what it accepted (see the rules)."""
        group = self.lead.group
        self.lead.busy("a decode step", plan)
        self.lead.send(plan, self.seeded)
        out = self.forward.run(plan, self.rows)
        for i, error in out.failed.items():  # a collective inside the model failed: a rank is gone, not this row
            if not isinstance(error, GroupBroken) and group.lost(error):
                out.failed[i] = GroupBroken(group.broken)
        before = {i: (row, len(row.generated)) for i, row in self.rows.items()}
        self.fold(plan, out)
        for i, (row, n) in before.items():
            if len(row.generated) > n:
                self.lead.accepted.setdefault(i, []).extend(row.generated[n:])
        if not self.rows:  # the last rows left: the followers end theirs now, not at the next request
            self.lead.send(None, self.seeded)
