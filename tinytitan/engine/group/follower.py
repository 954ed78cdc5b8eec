"""A follower of a group: the rows rank 0 opened, stepped by its plans and folded by its fold (lockstep.py's
rules: what each message says, and how a follower keeps its rows and prompt cache as rank 0 keeps its own).

Rules:
- A follower waits for rank 0's next message inside a collective, which MLX's ring backend spins in and no
  thread can interrupt. Rank 0 sends one at least every ``IDLE_S`` while the group is whole (a heartbeat when it
  is idle), and none once it is broken: a follower back from a stall that broke the group (its host asleep,
  swapping) would spin there for good. So a watchdog (``Silence``) ends the process when a wait for rank 0
  passes ``timeout`` (``--group-timeout``, rank 0's own limit), that for each ``PREFILL_STEP`` tokens the last
  step read (as rank 0 allows the step: under pipeline sharding the first stage is done with its layers while
  rank 0 still runs its own), or ten times that after a switch of models (rank 0 loads its part before its next
  message); the first message is not timed (rank 0 may load longer). The forward a plan runs is timed alike
  (``timeout`` for each ``PREFILL_STEP`` tokens it reads): its collectives wait for every other rank, and in a
  group of three or more one follower lost mid-step leaves another inside the model's collective, spinning, as
  rank 0 (whose watchdog breaks the group) sends nothing more.
  Under ``mlx.launch`` one rank's exit ends them all, and a restart of the whole group is the recovery.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..cache.entries import Kept, PromptFacts
from ..decode.rows import LEFT, Ending, Row
from ..decode.scheduler import Scheduler
from ..decode.step import Forward, Plan
from ..decode.token_events import DecodeLoop
from ..prompt.prepare import Prepared
from ..prompt.raw import VerbatimParser
from .lockstep import step_allowance
from .ranks import Group

log = logging.getLogger("tinytitan.lockstep")


def follower_row(backend, spec: dict) -> Row:
    """A row opened from rank 0's message, as rank 0 opened it: its prompt ids, cap, sampling values, seed and
    grammar — no request, no chat template, no parser, no client."""
    from ..structured import CompiledGrammar
    from ..structured.compile import llg_tokenizer

    grammar = None
    if spec["grammar"] is not None:
        llt = llg_tokenizer(backend.tokenizer, backend.vocab_size)
        grammar = CompiledGrammar(spec["grammar"], llt, max(backend.vocab_size or 0, llt.vocab_size),
                                  spec["grammar_name"])
    prepared = Prepared(req=None, tokens=spec["tokens"], max_tokens=spec["max_tokens"], grammar=grammar,
                        sampling=spec["sampling"], seed=spec["seed"], raw=spec["raw"],
                        speculative=spec["speculative"], cache_facts=PromptFacts.from_json(spec["facts"]),
                        logprobs=spec["logprobs"])
    loop = DecodeLoop(VerbatimParser(), (), lambda _event: None, prepared.sampling)
    row = Row(backend, prepared, loop=loop, should_stop=lambda: False)
    row.whole_prompt = spec.get("whole_prompt", False)  # no cached prefix where rank 0's reads its whole prompt
    # its prefill's logits read where rank 0's are (for its prompt's figures, which only rank 0 sends): evaluating
    # them runs the collectives after the last layer (a pipeline's gather), which every rank must run alike
    row.prompt_top = spec.get("prompt_logprobs")
    return row


class FollowerScheduler(Scheduler):
    """A follower's rows: opened from rank 0's messages (``open_row``), stepped by rank 0's plans and folded by
    the very fold rank 0 runs (``Scheduler.fold``); retired when rank 0's message says so (``settle``)."""

    def __init__(self, backend, max_batch: int, seeded: bool):
        super().__init__(lambda _b: None, max_batch, 0, seeded)
        self.backend, self.forward = backend, Forward(backend, max_batch)

    def open_row(self, row: Row, row_id: int, cached: int, failed: bool = False) -> None:
        """Open a row rank 0 opened; one that ``failed`` there once its opening took from the prompt cache is
        opened as far as it goes here and retired at once, keeping nothing, as rank 0 kept nothing of it."""
        row.id = row_id
        self.rows[row_id] = row
        try:
            self.forward.own(row_id, row.open(self.forward.model, self.seeded))
        except Exception:  # (a failed row fails here as it did there, once it asked the prompt cache as rank 0 did)
            if not failed:
                raise
        if failed:
            row.ending = Ending("failed", error=RuntimeError("failed on rank 0"))
            super().retire(row, Kept(0, 0))
        if not row.fetched or row.read != cached:
            where = f"at {row.read} tokens" if row.fetched else "nowhere (it failed before asking)"
            raise RuntimeError(f"diverged: its prompt cache starts row {row_id} {where}, rank 0's at {cached}")

    def retire(self, row: Row, like: Kept | None = None) -> None:
        """The fold's retirement waits for rank 0's message (``settle``): a row ended here stays in the table, its
        ending set, until then (see the rules)."""

    def settle(self, ended: list[list]) -> None:
        """The rows rank 0 retired since its last message, retired here in its order (each keeps in the prompt
        cache what rank 0's kept, unless it failed there); then the entries of the turns that ended with no
        tool call, which only rank 0's parser knows, are marked final answers' (see the rules)."""
        finals = []
        for row_id, kind, final, tokens, nbytes in ended:
            row = self.rows.get(row_id)
            if row is None:
                continue
            if kind == "failed":
                row.ending = Ending("failed", error=RuntimeError("failed on rank 0"))
            elif row.ending is None or row.ending.kind == "failed":  # a stop string only rank 0 sees, its consumer
                row.ending = LEFT
            super().retire(row, Kept(tokens, nbytes))
            if final and row.kept is not None:
                finals.append((row.backend.prompt_cache, row.kept))
        for cache, key in finals:
            cache.answered_finally(key)

    def answered(self, row: Row) -> None:
        """A follower parses no answer: rank 0's message says whether the turn ended with no tool call."""

    def run(self, plan: Plan) -> dict[int, list[int]]:
        """Rank 0's plan: the forward, then the fold; the tokens each row accepted (for rank 0's to match). A row
        the plan steps that ended here (its own hook failed, say) has diverged: rank 0's fold did not end it."""
        for s in (*plan.alone, *plan.batch):
            row = self.rows.get(s.row)
            if row is None or row.ending is not None:
                why = "it is not open here" if row is None else f"it ended here ({row.ending.kind}: {row.ending.error})"
                raise RuntimeError(f"diverged: rank 0's plan steps row {s.row}, but {why}")
        before = {i: (row, len(row.generated)) for i, row in self.rows.items()}
        self.fold(plan, self.forward.run(plan, self.rows))
        return {i: row.generated[n:] for i, (row, n) in before.items() if len(row.generated) > n}


class Silence:
    """The watchdog of a follower's waits for rank 0 (see the rules): ``waiting(allowed)`` before one, ``heard()``
    after; a wait past its allowance ends the process."""

    def __init__(self, rank: int, timeout: float):
        self.rank, self.timeout = rank, timeout
        self.wait: tuple[float, float, str] | None = None  # (since, allowed, what): one value, read at once
        threading.Thread(target=self._watch, name="tinytitan-follower-watchdog", daemon=True).start()

    def waiting(self, allowed: float, what: str = "no word from rank 0") -> None:
        self.wait = (time.monotonic(), allowed, what)

    def heard(self) -> None:
        self.wait = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            wait = self.wait
            if wait is not None and time.monotonic() - wait[0] > wait[1]:
                log.error("rank %d stops: %s in %.0f s (the group is broken, or a rank is stuck); "
                          "restart the whole group", self.rank, wait[2], time.monotonic() - wait[0])
                logging.shutdown()
                os._exit(1)  # (the wait is a spinning collective no thread can interrupt)


def next_wait(msg: dict, plan: Plan | None, timeout: float) -> float:
    """How long a follower waits for rank 0's message after ``msg`` (see the rules): ten times ``timeout`` after a
    switch of models, else the allowance of the step its ``plan`` opens (``timeout`` without one)."""
    if "m" in msg:
        return 10 * timeout
    return step_allowance(plan.tokens if plan is not None else 0, timeout)


def follow(group: Group, backends: list, max_batch: int, timeout: float | None = None) -> None:
    """A follower's whole life: the steps rank 0 broadcasts, run on this rank's part of the model (of a
    catalog: the one rank 0 switched to last), until the group breaks (rank 0 gone); ``timeout``: the longest
    wait for rank 0's next message (see the rules; None: no limit)."""
    silence = Silence(group.rank, timeout) if timeout else None
    allowed: float | None = None  # (the first message: not timed)
    by_id = {b.model_id: b for b in backends}
    backend = next((b for b in backends if b.loaded), backends[0])
    scheduler: FollowerScheduler | None = None
    accepted: dict[int, list[int]] = {}  # this rank's tokens of the last step, for rank 0's to match
    diverged: str | None = None
    log.info("rank %d follows rank 0's steps", group.rank)
    while True:
        if silence is not None and allowed is not None:
            silence.waiting(allowed)
        msg = group.share(report=diverged is not None)
        if silence is not None:
            silence.heard()
        plan = Plan.from_ints(msg["p"]) if "p" in msg else None
        if timeout:  # (rank 0 finishes the step this message opens, then plans the next: see the rules)
            allowed = next_wait(msg, plan, timeout)
        if diverged is not None:  # rank 0 has heard it (and broken the group)
            raise RuntimeError(diverged)
        for i, tokens in msg["a"]:  # what rank 0 accepted: what this rank's fold accepted, if in step
            mine = accepted.get(i, [])
            n = min(len(mine), len(tokens))
            if mine[:n] != tokens[:n] and diverged is None:
                diverged = (f"rank {group.rank} diverged: it sampled {mine[:n]} for row {i}, rank 0 "
                            f"accepted {tokens[:n]}")
                log.error("%s", diverged)
        accepted = {}
        if msg["e"]:  # (before a switch of models: the rows were the old model's)
            scheduler.settle(msg["e"])
        if msg.get("f"):  # (before a switch too: rank 0 made it for a row it admitted before switching)
            assert scheduler is None or not scheduler.rows, "a fresh decoder with rows in flight"
            if scheduler is not None:
                scheduler.close()
            scheduler = FollowerScheduler(backend, max_batch, msg["s"])
        for spec in msg.get("j", ()):  # (with a switch, only rows that failed on the old model: they took from
            try:                       # its prompt cache before rank 0 switched)
                if scheduler is None:
                    raise RuntimeError(f"diverged: row {spec['id']} joins before any decoder")
                scheduler.open_row(follower_row(backend, spec), spec["id"], spec["cached"], bool(spec.get("failed")))
            except RuntimeError as exc:
                raise RuntimeError(f"rank {group.rank} {exc}") from None
        if "m" in msg:  # rank 0 switches models (its rows have all left): load this rank's part too
            if msg["m"] not in by_id:
                raise RuntimeError(f"rank {group.rank} diverged: rank 0 switched to '{msg['m']}', not in this "
                                   f"rank's catalog ({', '.join(by_id)})")
            if scheduler is not None:
                scheduler.close()
                scheduler = None
            if backend is not by_id[msg["m"]]:
                backend.unload()
            backend = by_id[msg["m"]]
            try:
                backend.ensure_loaded()
            except Exception as exc:  # every rank was told (Group.load): rank 0 fails the request, the group goes on
                log.error("rank %d could not load %s: %s", group.rank, msg["m"], exc)
        if "i" in msg:  # rank 0 is idle: its next message comes after this pause (see the rules)
            time.sleep(msg["i"])
        if plan is None:
            continue
        if silence is not None:  # (its collectives wait for every other rank: see the rules)
            silence.waiting(step_allowance(plan.tokens, timeout), "a step's forward not done")
        accepted = scheduler.run(plan)
        if silence is not None:
            silence.heard()
