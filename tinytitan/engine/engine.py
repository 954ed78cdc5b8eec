"""The engine: model names, bounded admission, one decode at a time, and the thread bridge.

Rules:
- ``admit()`` answers at once: a ticket, or ApiError('overloaded') when ``max_queue`` requests already wait.
- A ticket waits (FIFO) for the decode slot; only one generation decodes at a time.
- ``generate()`` yields TokenEvents. Decoding runs in a worker thread; when the consumer goes away (a
  client hung up: the async generator is closed or cancelled) the thread is told to stop and is waited
  for — it stops within a token, and no thread outlives its request.
- The engine never imports a protocol.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import AsyncIterator

import trio

from ..chat_request import ChatRequest
from ..errors import ApiError
from ..events import Failed, KeepAlive, TokenEvent
from .backend import Backend, Prepared
from .decode_loop import DecodeLoop
from .prompt import fast_path

log = logging.getLogger("tinytitan.engine")

FAST_SUFFIX = "-fast"


class Engine:
    def __init__(self, backends: Backend | list[Backend], max_queue: int = 16):
        backends = [backends] if isinstance(backends, Backend) else list(backends)
        if not backends:
            raise ValueError("no models to serve")
        self.backends: dict[str, Backend] = {b.model_id: b for b in backends}
        self.default_id = backends[0].model_id
        self.resident: str | None = next((b.model_id for b in backends if b.loaded), None)
        self.max_queue = max_queue
        self._slot = trio.Lock()
        self.waiting = 0
        self.running = 0
        self.started_at = time.time()

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
        if self.waiting >= self.max_queue and (self.running or self._slot.locked()):
            raise ApiError("overloaded", f"The server is busy: {self.waiting} requests are already waiting "
                           f"(--max-queue {self.max_queue}); retry shortly", code="queue_full")
        return Ticket(self)

    # -- generation ----------------------------------------------------------------------------------------
    async def prepare(self, req: ChatRequest) -> Prepared:
        return await trio.to_thread.run_sync(self.backends[req.model].prepare, req)

    async def count_tokens(self, req: ChatRequest) -> int:
        """The prompt's length exactly as generation would render it; 501 for a backend with no tokenizer."""
        if self.backend.tokenizer is None:
            raise ApiError("not_implemented", f"Token counting is not available: the backend serving "
                           f"'{self.model_id}' has no tokenizer", code="not_implemented")
        return await trio.to_thread.run_sync(self.backend.count_tokens, req)

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
                async for ev in _keepalive_while(self._make_resident(backend), keepalive):
                    yield ev
            async for ev in _threaded(backend, prepared, keepalive):
                yield ev
        finally:
            ticket.release()

    async def _make_resident(self, backend: Backend) -> None:
        """Called holding the decode slot, so no generation is in flight: unload the resident model,
        load the named one."""
        if self.resident and self.resident != backend.model_id:
            log.info("switching models: unloading %s for %s", self.resident, backend.model_id)
            await trio.to_thread.run_sync(self.backends[self.resident].unload)
        self.resident = None
        await trio.to_thread.run_sync(backend.ensure_loaded)
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
                if target in (None, model_id) and await trio.to_thread.run_sync(backend.unload):
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


async def _threaded(backend: Backend, prepared: Prepared, keepalive: float | None = None) -> AsyncIterator[TokenEvent]:
    """Run ``backend.decode`` in a worker thread and yield its events here."""
    send, recv = trio.open_memory_channel(math.inf)
    stop = threading.Event()
    finished = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def put(ev: TokenEvent) -> None:
        try:
            send.send_nowait(ev)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            stop.set()

    def emit(ev: TokenEvent) -> None:
        try:
            token.run_sync_soon(put, ev)
        except trio.RunFinishedError:
            stop.set()

    def work() -> None:
        parser = backend.parser(prepared)
        loop = DecodeLoop(parser, prepared.req.stop, emit)
        try:
            backend.decode(prepared, loop, stop.is_set)
        except Exception as exc:  # reported in-band: the stream may already be open
            if not stop.is_set():
                log.exception("generation failed")
                if not loop.finished:
                    emit(Failed(f"generation failed: {exc}"))

    def done(_outcome) -> None:
        def close() -> None:
            send.close()
            finished.set()

        try:
            token.run_sync_soon(close)
        except trio.RunFinishedError:
            pass

    trio.lowlevel.start_thread_soon(work, done)
    try:
        async with recv:
            quiet = 0.0
            while True:
                with trio.move_on_after(keepalive if keepalive else math.inf) as timer:
                    try:
                        ev = await recv.receive()
                    except trio.EndOfChannel:
                        return
                if timer.cancelled_caught:
                    quiet += keepalive
                    yield KeepAlive(quiet)
                    continue
                quiet = 0.0
                yield ev
    finally:
        stop.set()
        with trio.CancelScope(shield=True):
            await finished.wait()
