"""The engine: model names, bounded admission, generation sessions, and the model thread.

Rules:
- ``async with engine.session(req) as events`` is the only way to generate (session.py): it admits at once
  (ApiError('overloaded') when ``max_queue`` requests already wait beyond the running batch; 503
  ``server_shutting_down`` once the server stops, ``wind_down``), then tokenizes; ``events`` waits for a decode
  slot (FIFO; ``max_batch`` generations decode together) and yields TokenEvents; leaving the block stops the
  decode and gives the place back, exactly once.
- Decoding, loading and unloading run on the process's one model thread (model_thread.py). A session's
  request becomes a row of the decoder (decoder.py): one decode step — plan → forward → fold (step.py) —
  serves a lone request and a batch alike (continuous batching over mlx-lm's batch KV caches, up to
  ``max_batch`` rows; with 1, every request decodes alone). Either way the model is made resident first, and
  when the consumer goes away the decode stops within a token (within a prefill chunk while the prompt is
  read): no decode outlives its session.
- The engine never imports a protocol.

Per-request hooks (what structured output and server-run memory tools attach; the step does not change
for them, and each row has its own):
- Logits processors: ``MLXBackend.logits_processors(prepared)`` returns the request's mlx-lm
  LogitsProcessors, ``processor(tokens, logits) -> logits`` with ``logits`` of shape ``[1, vocab]``: the
  sampling penalties, then the output format's grammar mask (``Prepared.logits_processor()``), a new one
  per generation. ``tokens`` is the request's own context and ends with the token sampled last
  (on the first call, the prompt's last token). The step calls them the same way alone and in the batch, once
  per sampled token — except that a speculative step (speculative/) also asks them about the positions after
  draft tokens it may reject: a processor must be a function of its ``tokens`` (the penalties are), or be
  rolled back with them (the grammar mask's matcher is). Keep
  them lazy (no ``mx.eval`` inside): the step is evaluated at once. One that raises fails its own request
  only (in a batch, after the step: the others go on).
- A continuation (a server-run tool's result fed back, as the memory layer does) is a further session of the
  same request, ``engine.session(req, continuing=True)``: never refused as overloaded, it becomes a row of
  its own and starts from the longest cached prefix (the turn before is stored when it ends).
"""

from __future__ import annotations

import functools
import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from .. import images
from ..chat_request import ChatRequest
from ..errors import LOAD_ERRORS, ApiError
from ..events import SHUTTING_DOWN
from ..models.names import FAST_SUFFIX, spellings
from .backends.base import Backend
from .cache.handoff import HandOffs
from .cache.memory import PromptCache
from .prompt.prepare import Prepared
from . import DEFAULT_MAX_BATCH, DEFAULT_STREAM_INTERVAL_MS
from .decode.decoder import Decoder
from .model_thread import ModelThread, shared_model_thread
from .prompt.messages import fast_path
from .decode.rows import Row
from .group.ranks import GroupBroken
from .admission import Admission, Capacity, Unit
from .session import FOLDED_INTERVAL, Mailbox, Session
from .summarise import Summariser

log = logging.getLogger("tinytitan.engine")


class Engine:
    def __init__(self, backends: Backend | list[Backend], max_queue: int = 16,
                 model_thread: ModelThread | None = None, max_batch: int = DEFAULT_MAX_BATCH, group=None,
                 group_timeout: float = 60.0, stream_interval: float = DEFAULT_STREAM_INTERVAL_MS / 1000):
        """``max_batch``: how many generations decode together (decoder.py); 1 decodes one request at a time.
        ``stream_interval``: a streamed session's deltas after the first, at most one batch per that many seconds.
        Backends that cannot batch (the scripted one) decode one at a time, each request in one job.
        ``group``: this process is rank 0 of a group serving one model (group/ranks.py); its decoder steps every
        rank in lockstep (lockstep.py); a step that waits ``group_timeout`` seconds for the others breaks it."""
        backends = [backends] if isinstance(backends, Backend) else list(backends)
        if not backends:
            raise ValueError("no models to serve")
        self.backends: dict[str, Backend] = {b.model_id: b for b in backends}
        self.default_id = backends[0].model_id
        self.resident: str | None = next((b.model_id for b in backends if b.loaded), None)
        self.max_queue = max_queue
        self.stream_interval = stream_interval
        self.folded_interval = FOLDED_INTERVAL
        self.model_thread = model_thread or shared_model_thread()
        stepping = all(getattr(b, "batches", False) for b in backends)
        self.max_batch = max(1, max_batch) if stepping else 1
        # the MLX backends decode through the decoder (one step for a lone request and a batch alike); a
        # backend that decodes a request whole (the scripted one) does so in one job
        self.group = group
        make_scheduler = {}
        if group is not None:
            from .group.lockstep import Lead

            self.lead = Lead(group, group_timeout)
            make_scheduler = {"make_scheduler": self.lead.scheduler}
        self.decoder = Decoder(self.model_thread, self._make_resident, self.max_batch,
                               **make_scheduler) if stepping else None
        if group is not None and self.decoder is not None:
            self.lead.waiting = self.decoder.arrived
            self.lead.watch(self.model_thread)
        self.admission = Admission(self.max_batch, max_queue)
        # the prompts its requests' first choices hand to their others (cache/handoff.py): this engine's alone;
        # none on a group, where every rank starts a row from the same prefix
        self.handoffs: HandOffs | None = HandOffs() if group is None else None
        self.sessions: set[Session] = set()  # the sessions open now (``wind_down`` ends them)
        self.stopped: ApiError | None = None  # the server stops: every session ends with it (``wind_down``)
        self._emptied = trio.Event()
        self.started_at = time.time()
        # model id -> how long its last load took (a backend loaded before the engine existed timed its own)
        self.load_seconds: dict[str, float] = {b.model_id: b.load_seconds for b in backends
                                               if b.loaded and getattr(b, "load_seconds", None) is not None}

    # -- names ---------------------------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        """The resident model (or the first one, when none is loaded)."""
        return self.resident or self.default_id

    @property
    def backend(self) -> Backend:
        return self.backends[self.model_id]

    def backend_for(self, model_id: str) -> Backend:
        return self.backends[model_id]

    def resolve(self, name: str | None) -> tuple[str, bool]:
        """A request's model name → (served id, fast?). Unknown names are refused, never answered. ``<id>:latest``
        is the id (the tag ``ollama list`` shows, copied into any client; Ollama's own /v1 takes it too)."""
        if isinstance(name, str):
            for n in spellings(name):
                if n in self.backends:
                    return n, False
                if n.endswith(FAST_SUFFIX) and n[: -len(FAST_SUFFIX)] in self.backends:
                    return n[: -len(FAST_SUFFIX)], True
        served = ", ".join(f"'{m}'" for m in self.backends)
        raise ApiError("model_not_found", f"The model '{name}' does not exist; this server serves {served} "
                       f"(each also as '<id>{FAST_SUFFIX}')", param="model", code="model_not_found",
                       data={"model": name, "served": served})  # (a protocol may word it its own way)

    def apply_model(self, req: ChatRequest) -> ChatRequest:
        """The request for the model it names: a text model's request with images refused (``images``: one
        typed error each protocol words its own way), a vision model's images checked (format, size, count)."""
        base, fast = self.resolve(req.model)
        images.refuse_unseen(req, self.backends[base].takes_images, base)
        images.check_request(req)
        req = req.with_(model=base, fast=fast)
        return fast_path(req) if fast else req

    # -- admission -----------------------------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        return self.admission.waiting

    @property
    def running(self) -> int:
        return self.admission.running

    @property
    def capacity(self) -> Capacity:
        """The most generations it ever holds at once (``.most``), with its parts: its decode slots and
        ``max_queue`` waiting. A request whose generations are admitted as a unit (``unit``) beyond that is
        refused whatever the load: a retry would never fit."""
        return self.admission.capacity

    @property
    def batch_size(self) -> int:
        """Generations decoding together now (with no decoder: the one decoding, if any)."""
        return self.decoder.size if self.decoder is not None else self.running

    # -- generation ----------------------------------------------------------------------------------------
    async def prepare(self, req: ChatRequest) -> Prepared:
        return await trio.to_thread.run_sync(self.backends[req.model].prepare, req)

    async def count_tokens(self, req: ChatRequest) -> int:
        """The prompt's length exactly as generation would render it; 501 for a backend with no tokenizer."""
        backend = self.backends[req.model]  # the model the request names, not whichever is resident
        if backend.tokenizer is None:
            raise ApiError("not_implemented", f"Token counting is not available: the backend serving "
                           f"'{backend.model_id}' has no tokenizer", code="not_implemented")
        return await trio.to_thread.run_sync(backend.count_tokens, req)

    @asynccontextmanager
    async def session(self, req: ChatRequest, keepalive: float | None = None,
                      continuing: bool = False, streamed: bool = True,
                      unit: Unit | None = None) -> AsyncIterator[Session]:
        """One generation, from admission to its place given back (see session.py for the rules): a place
        first (refused at once when the queue is full), then the prompt; the block iterates the events; its
        exit stops the decode and frees the place, once. With ``keepalive`` seconds, a KeepAlive whenever that
        long passes with nothing to send (in the queue, while a model loads, or during a long prefill).
        ``continuing``: a further generation of a request already admitted, never refused as overloaded.
        ``streamed=False``: the consumer folds the whole answer, so its events come in fewer, larger batches.
        ``unit``: one of the request's sessions admitted as a unit (its choices: ``unit(n)``), each given it: the
        first is refused here unless the queue holds them all, and takes all their places; the others, never
        refused, take theirs (admission.py). The request's end gives back those none took (``end_unit``)."""
        if self.group is not None and self.group.broken:
            raise GroupBroken(self.group.broken)
        if self.admission.refusable(continuing, unit):  # (as admission answers it: a further one never is)
            self._refuse_if_stopped()
        place = self.admission.admit(continuing, unit)
        session = None
        try:
            prepared = await self.prepare(req)
            every = self.stream_interval if streamed else max(self.stream_interval, self.folded_interval)
            session = Session(prepared, place, functools.partial(self._start_decode, prepared), keepalive, every)
            self.sessions.add(session)
            if self.stopped is not None:
                session.interrupt(self.stopped)
            else:
                session.begin()
            yield session
        finally:
            if session is not None:
                self.sessions.discard(session)
                if not self.sessions:
                    self._emptied.set()
                await session._end()  # gives the place back
            else:
                place.give_back()

    def unit(self, size: int, response_id: str | None = None) -> Unit:
        """What a request's ``size`` sessions (its choices, each ``ChatRequest`` with ``response_id``) are each
        opened with, to be admitted as a unit; what the request holds is let go with it (``end_unit``)."""
        return Unit(size, response_id)

    def end_unit(self, unit: Unit) -> None:
        """The request of ``unit`` has ended, every choice of it (called once their sessions have; again, nothing
        more): the places it held that no session took go back, and the prompts its first choices handed to the
        others (where the prompt cache would not hold them: cache/handoff.py) go."""
        self.admission.release(unit)
        if self.handoffs is not None:
            self.handoffs.release(unit.response_id)

    async def wind_down(self, grace: float) -> None:
        """The server stops: the generations still open after ``grace`` seconds (and any further round of a
        request already admitted) end at their next event with a ``Failed`` in-band (503
        ``server_shutting_down``), so each stream closes in its protocol's own words, and each folded answer is
        that error, before the HTTP server cuts connections. A generation asked for after that is refused at
        ``session`` with that error: nothing was sent, so its status says it (a stream's too)."""
        with trio.move_on_after(grace):
            while self.sessions:
                self._emptied = trio.Event()
                await self._emptied.wait()
        self.stopped = ApiError("unavailable", "the server is shutting down; retry once it is back",
                                code=SHUTTING_DOWN)
        for session in list(self.sessions):
            session.interrupt(self.stopped)

    def _refuse_if_stopped(self) -> None:
        """A generation asked for once the server stopped (``wind_down``): nothing was sent, so it is refused
        with that 503 in its protocol's envelope, as a full queue is, never begun to end in-band."""
        if self.stopped is not None:
            raise ApiError(self.stopped.kind, self.stopped.message, code=self.stopped.code)

    def _start_decode(self, prepared: Prepared, box: Mailbox) -> None:
        """Called by a session holding a decode slot: the request becomes a row of the decoder (decoder.py),
        or, for a backend that decodes a request whole, one job on the model thread makes the model resident,
        then decodes into the session's mailbox. A model that will not load is the consumer's exception; a
        failure once decoding began is reported in-band (the stream may already be open)."""
        backend = self.backends[prepared.req.model]
        if self.decoder is not None:
            try:
                row = Row(backend, prepared, box, handed=self.handoffs)
            except Exception as exc:
                box.close(exc)
                return
            self.decoder.submit(row)
            return

        def work() -> None:
            try:
                loop = box.open_loop(backend.parser(prepared), prepared, load_s=self._make_resident(backend))
            except BaseException as exc:  # the thread lets go of the session: the consumer raises it (an error)
                box.close(exc if isinstance(exc, Exception) else RuntimeError(f"the model could not load: {exc!r}"))
                return
            try:
                backend.decode(prepared, loop, box.stop.is_set)
            except Exception as exc:  # reported in-band: the stream may already be open
                if not box.stop.is_set():
                    log.exception("generation failed")
                    loop.fail(exc)  # (nothing where the row's own end told it already)
            finally:
                box.close()  # the thread lets go of the session, whatever happened

        self.model_thread.start_soon(work, lambda _outcome: None)

    def _make_resident(self, backend: Backend) -> float | None:
        """On the model thread, with no other generation in flight: unload the resident model if another is
        named, load the named one. Returns the seconds that took (the generation's ``Timing.load_s``, kept in
        ``load_seconds``), None when the model was resident already."""
        if self.resident == backend.model_id and backend.loaded:
            return None
        started = time.perf_counter()
        if self.group is not None:  # every rank switches with it (lockstep.py)
            self.lead.switch(backend.model_id)
        if self.resident and self.resident != backend.model_id:
            log.info("switching models: unloading %s for %s", self.resident, backend.model_id)
            self.backends[self.resident].unload()
        self.resident = None
        try:
            backend.ensure_loaded()
        except ApiError:  # already in its own words (GroupBroken: 503 group_broken; Unshardable: 501 …)
            raise
        except LOAD_ERRORS as exc:  # damaged or missing weights …
            raise ApiError("server_error", f"The model {backend.model_id} cannot be loaded "
                           f"({type(exc).__name__}: {str(exc)[:300]})", code="model_load_failed") from exc
        self.load_seconds[backend.model_id] = seconds = time.perf_counter() - started
        self.resident = backend.model_id
        return seconds

    def models(self) -> list[dict]:
        return [dict(b.describe(), loaded=b.loaded and self.resident == b.model_id) for b in self.backends.values()]

    def model_info(self, name: str) -> dict:
        base, _ = self.resolve(name)
        return next(m for m in self.models() if m["id"] == base)

    def summariser(self, model: str, budget: int | None = None) -> Summariser:
        """The compaction service: a transcript summarised by the named model, within ``budget`` tokens
        (see summarise.py); refused once the server stopped, before a compaction's answer begins."""
        self._refuse_if_stopped()
        return Summariser(self, model, budget)

    def model_card(self, name: str) -> dict:
        """``model_info`` and what a client may show besides: family, chat template, capabilities."""
        info = self.model_info(name)
        return {**self.backends[info["id"]].card(), **info}

    async def load(self, name: str | None = None) -> str:
        """Make a model resident now (it would load on its next request anyway), once the generation in
        flight is done; the model it replaces is unloaded."""
        backend = self.backends[self.resolve(name)[0] if name else self.model_id]
        async with self.admission.exclusive():
            await self.model_thread.run_sync(self._make_resident, backend)
        return backend.model_id

    async def unload(self, name: str | None = None) -> list[str]:
        """Free a model's memory (weights and cached prefixes); it loads again on its next request."""
        target = name and self.resolve(name)[0]
        if self.group is not None:  # every rank holds a part: a switch lets go of one, not the route
            log.info("the models stay loaded: they are sharded across a group of %d processes", self.group.size)
            return []
        async with self.admission.exclusive():
            freed = []
            for model_id, backend in self.backends.items():
                if target in (None, model_id) and await self.model_thread.run_sync(backend.unload):
                    freed.append(model_id)
                    if self.resident == model_id:
                        self.resident = None
        return freed

    def health(self) -> dict:
        if self.group is not None:
            lead = self.lead
            group = dict(self.group.describe(), steps=lead.steps, step_s=round(lead.step_s, 6),
                         batch_steps=lead.batch_steps, plan_broadcast_share=round(lead.share_of_step(), 4),
                         idle_heartbeats=lead.heartbeats, idle_pause_s=lead.idle_s)
            if self.group.broken:  # /health answers 503 with this (protocols/shared.py)
                return {"status": "broken", "error": {"message": self.group.broken,
                                                      "ranks": self.group.broken_ranks},
                        "group": group, **self._health()}
            return {"status": "ok", "group": group, **self._health()}
        return {"status": "ok", **self._health()}

    def _health(self) -> dict:
        return {"model": self.resident, "models": list(self.backends), "queue_depth": self.waiting,
                "running": self.running, "waiting": self.waiting, "max_batch": self.max_batch,
                "max_queue": self.max_queue,
                "prompt_cache": {mid: summary for mid, b in self.backends.items()
                                 if (summary := cache_summary(getattr(b, "prompt_cache", None))) is not None}}


def cache_summary(cache: PromptCache | None) -> dict | None:
    """What ``/health`` and the dashboard show of a model's prompt cache: resident and on-disk size, hit rate."""
    if cache is None:
        return None
    s = cache.stats()
    looked = s["hits"] + s["misses"]
    disk = s.get("disk") or {}
    return {"resident_bytes": s["bytes"], "resident_entries": s["entries"], "max_bytes": s["max_bytes"],
            "disk_bytes": disk.get("bytes", 0), "disk_entries": disk.get("entries", 0),
            "disk_max_bytes": disk.get("max_bytes", 0), "disk_reads": disk.get("reads", 0),
            "disk_writes": disk.get("writes", 0), "disk_pending": disk.get("pending", 0),
            "hits": s["hits"], "misses": s["misses"], "hit_rate": (s["hits"] / looked) if looked else None}
