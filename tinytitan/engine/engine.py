"""The engine: model names, bounded admission, one decode at a time, and the thread bridge.

Rules:
- ``admit()`` answers at once: a ticket, or ApiError('overloaded') when ``max_queue`` requests already wait.
- A ticket waits (FIFO) for the decode slot; only one generation decodes at a time.
- ``generate()`` yields TokenEvents. Decoding (like loading and unloading) runs on the process's one model
  thread (model_thread.py); when the consumer goes away (a client hung up: the async generator is closed
  or cancelled) the decode is told to stop and is waited for — it stops within a token (within a prefill
  chunk while the prompt is read), and no decode outlives its request.
- The engine never imports a protocol.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
import time
from contextlib import aclosing
from typing import AsyncIterator

import trio

from ..chat_request import ChatRequest
from ..errors import ApiError
from ..events import Failed, Finished, KeepAlive, ReasoningDelta, TextDelta, TokenEvent, ToolCallArgsDelta
from .backend import Backend, Prepared
from .decode_loop import DecodeLoop
from .model_thread import ModelThread, shared_model_thread
from .prompt import fast_path

log = logging.getLogger("tinytitan.engine")

FAST_SUFFIX = "-fast"


class Engine:
    def __init__(self, backends: Backend | list[Backend], max_queue: int = 16,
                 model_thread: ModelThread | None = None):
        backends = [backends] if isinstance(backends, Backend) else list(backends)
        if not backends:
            raise ValueError("no models to serve")
        self.backends: dict[str, Backend] = {b.model_id: b for b in backends}
        self.default_id = backends[0].model_id
        self.resident: str | None = next((b.model_id for b in backends if b.loaded), None)
        self.max_queue = max_queue
        # a semaphore, not a lock: the slot belongs to a request, not to whichever task happens to end it
        self._slot = trio.Semaphore(1)
        self.waiting = 0
        self.running = 0
        self.started_at = time.time()
        self.model_thread = model_thread or shared_model_thread()

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
        """A request's model name → (served id, fast?). Unknown names are refused, never answered."""
        if isinstance(name, str):
            if name in self.backends:
                return name, False
            if name.endswith(FAST_SUFFIX) and name[: -len(FAST_SUFFIX)] in self.backends:
                return name[: -len(FAST_SUFFIX)], True
        served = ", ".join(f"'{m}'" for m in self.backends)
        raise ApiError("model_not_found", f"The model '{name}' does not exist; this server serves {served} "
                       f"(each also as '<id>{FAST_SUFFIX}')", param="model", code="model_not_found")

    def apply_model(self, req: ChatRequest) -> ChatRequest:
        base, fast = self.resolve(req.model)
        req = req.with_(model=base, fast=fast)
        return fast_path(req) if fast else req

    # -- admission -----------------------------------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return self.waiting

    def admit(self) -> "Ticket":
        if self.waiting >= self.max_queue and (self.running or self._slot.value == 0):
            raise ApiError("overloaded", f"The server is busy: {self.waiting} requests are already waiting "
                           f"(--max-queue {self.max_queue}); retry shortly", code="queue_full")
        return Ticket(self)

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

    async def generate(self, prepared: Prepared, ticket: "Ticket",
                       keepalive: float | None = None) -> AsyncIterator[TokenEvent]:
        """The request's TokenEvents; with ``keepalive`` seconds, a KeepAlive whenever that long passes
        with nothing to send (in the queue, while a model loads, or during a long prefill)."""
        waited = 0.0
        while True:
            with trio.move_on_after(keepalive if keepalive else math.inf):
                await ticket.acquire()
                break
            waited += keepalive
            yield KeepAlive(waited)
        try:
            backend = self.backends[prepared.req.model]
            if self.resident != backend.model_id or not backend.loaded:
                async with aclosing(_keepalive_while(self._make_resident(backend), keepalive)) as loading:
                    async for ev in loading:
                        yield ev
            # aclosing: a consumer that stops early stops the decoding thread now, in this task, not
            # whenever the garbage collector finalizes the generator
            async with aclosing(_threaded(backend, prepared, keepalive, self.model_thread)) as decoded:
                async for ev in decoded:
                    yield ev
        finally:
            ticket.release()

    async def _make_resident(self, backend: Backend) -> None:
        """Called holding the decode slot, so no generation is in flight: unload the resident model,
        load the named one."""
        if self.resident and self.resident != backend.model_id:
            log.info("switching models: unloading %s for %s", self.resident, backend.model_id)
            await self.model_thread.run_sync(self.backends[self.resident].unload)
        self.resident = None
        await self.model_thread.run_sync(backend.ensure_loaded)
        self.resident = backend.model_id

    def models(self) -> list[dict]:
        return [dict(b.describe(), loaded=b.loaded and self.resident == b.model_id) for b in self.backends.values()]

    def model_info(self, name: str) -> dict:
        base, _ = self.resolve(name)
        return next(m for m in self.models() if m["id"] == base)

    async def unload(self, name: str | None = None) -> list[str]:
        """Free a model's memory (weights and cached prefixes); it loads again on its next request."""
        target = name and self.resolve(name)[0]
        async with self._slot:
            freed = []
            for model_id, backend in self.backends.items():
                if target in (None, model_id) and await self.model_thread.run_sync(backend.unload):
                    freed.append(model_id)
                    if self.resident == model_id:
                        self.resident = None
        return freed

    def health(self) -> dict:
        return {"status": "ok", "model": self.resident, "models": list(self.backends), "queue_depth": self.waiting,
                "running": self.running, "max_queue": self.max_queue}


class Ticket:
    """A place in the queue, held from admission until the generation ends."""

    def __init__(self, engine: Engine):
        self.engine = engine
        engine.waiting += 1
        self._held = False
        self._released = False

    async def acquire(self) -> None:
        """Wait for the decode slot. Cancelled while waiting: the place in the queue is kept (call again)
        until ``release``."""
        await self.engine._slot.acquire()
        self.engine.waiting -= 1
        self.engine.running += 1
        self._held = True

    def abandon(self) -> None:
        """Give back a place whose generation never started (its response was dropped unsent); one that
        started is released by the generation itself."""
        if not self._held:
            self.release()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._held:
            self.engine.running -= 1
            self.engine._slot.release()
        else:
            self.engine.waiting -= 1


async def _keepalive_while(work, keepalive: float | None) -> AsyncIterator[TokenEvent]:
    """Run ``work`` (an awaitable) to completion, yielding KeepAlive every ``keepalive`` seconds meanwhile."""
    done = trio.Event()
    error: list[BaseException] = []

    async def run():
        try:
            await work
        except BaseException as exc:  # handed to the consumer below
            error.append(exc)
        finally:
            done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        waited = 0.0
        while not done.is_set():
            with trio.move_on_after(keepalive if keepalive else math.inf):
                await done.wait()
            if not done.is_set():
                waited += keepalive
                yield KeepAlive(waited)
    if error:
        raise error[0]


BATCH_INTERVAL = 0.02  # at most one batch of deltas per 20 ms after the first (the first goes at once)

_MERGEABLE = (TextDelta, ReasoningDelta, ToolCallArgsDelta)


def merge_deltas(events: list[TokenEvent]) -> list[TokenEvent]:
    """Adjacent deltas of one channel (and one tool call) become one event; nothing else changes."""
    out: list[TokenEvent] = []
    for ev in events:
        last = out[-1] if out else None
        if (isinstance(ev, _MERGEABLE) and type(last) is type(ev)
                and getattr(ev, "index", None) == getattr(last, "index", None)):
            out[-1] = dataclasses.replace(last, text=last.text + ev.text)
        else:
            out.append(ev)
    return out


class _Mailbox:
    """Events from the decoding thread to the trio side: the thread appends to a deque and schedules one
    wake-up at a time (not one per token); the trio side drains everything that has arrived."""

    def __init__(self, token: trio.lowlevel.TrioToken, stop: threading.Event):
        self.queue: collections.deque[TokenEvent] = collections.deque()
        self.token = token
        self.stop = stop
        self.wake_pending = False
        self.arrived = trio.Event()
        self.closed = False
        self.finished = trio.Event()

    # decoding thread
    def emit(self, ev: TokenEvent) -> None:
        self.queue.append(ev)
        if not self.wake_pending:
            self.wake_pending = True
            try:
                self.token.run_sync_soon(self._wake)
            except trio.RunFinishedError:
                self.stop.set()

    def thread_done(self, _outcome) -> None:
        try:
            self.token.run_sync_soon(self._close)
        except trio.RunFinishedError:
            pass

    # trio side
    def _wake(self) -> None:
        self.wake_pending = False
        self.arrived.set()

    def _close(self) -> None:
        self.closed = True
        self.arrived.set()
        self.finished.set()

    def drain(self) -> list[TokenEvent]:
        out = []
        while self.queue:
            out.append(self.queue.popleft())
        return out

    async def wait(self, timeout: float) -> bool:
        """Wait until something arrived (or the thread ended); False when ``timeout`` passed first."""
        if self.queue or self.closed:
            return True
        self.arrived = trio.Event()
        with trio.move_on_after(timeout):
            await self.arrived.wait()
            return True
        return False


async def _threaded(backend: Backend, prepared: Prepared, keepalive: float | None,
                    thread: ModelThread) -> AsyncIterator[TokenEvent]:
    """Run ``backend.decode`` on the model thread and yield its events here.

    Deltas that arrive together are merged, and after the first one they go out at most every
    BATCH_INTERVAL: a fast model's tokens cost one wake-up and one wire event per batch instead of one per
    token (the per-token overhead otherwise competes with decoding for the GIL). The end of a generation
    is sent at once."""
    stop = threading.Event()
    box = _Mailbox(trio.lowlevel.current_trio_token(), stop)

    def work() -> None:
        parser = backend.parser(prepared)
        loop = DecodeLoop(parser, prepared.req.stop, box.emit)
        try:
            backend.decode(prepared, loop, stop.is_set)
        except Exception as exc:  # reported in-band: the stream may already be open
            if not stop.is_set():
                log.exception("generation failed")
                if not loop.finished:
                    box.emit(Failed(f"generation failed: {exc}"))

    thread.start_soon(work, box.thread_done)
    try:
        quiet = 0.0
        last_batch = -math.inf
        while True:
            if not await box.wait(keepalive if keepalive else math.inf):
                quiet += keepalive
                yield KeepAlive(quiet)
                continue
            quiet = 0.0
            batch = box.drain()
            ending = box.closed or any(isinstance(ev, (Finished, Failed)) for ev in batch)
            pause = last_batch + BATCH_INTERVAL - trio.current_time()
            if batch and not ending and pause > 0:
                await trio.sleep(pause)  # let more tokens join this batch
                batch += box.drain()
            if batch:
                last_batch = trio.current_time()
                for ev in merge_deltas(batch):
                    yield ev
            if box.closed and not box.queue:
                return
    finally:
        stop.set()
        with trio.CancelScope(shield=True):
            await box.finished.wait()
