"""One generation's lifetime, owned by one construct: ``async with engine.session(req) as events``.

Rules:
- Entering takes a place in the queue first (``ApiError('overloaded')`` at once when it is full), then
  tokenizes the request (a prompt that does not fit is the client's ApiError, raised here too). Admission
  comes before tokenizing, so ``--max-queue`` bounds the work the server takes on, not only the waiting.
- ``events`` is an async iterator of TokenEvents. Iterating waits for a decode place (FIFO; a KeepAlive
  every ``keepalive`` seconds meanwhile), then the model thread makes the model resident and decodes.
- Leaving the block, however it is left (the end, an error, a client hang-up, a cancellation), tells the
  decode to stop and waits until the model thread has let go of it (shielded: within a token, or a prefill
  chunk while the prompt is read). The place goes back once, at the moment the model thread lets go of
  the generation (so it is free before the consumer sees the generation's last event), or at the exit
  when decoding never began.
- A model thread that may never come back (stuck in a collective of a group whose rank stopped answering)
  cannot let go: a group's watchdog then ends the consumer's side instead (``Mailbox.abandon``: the failure,
  and the place given back). What that thread sends after is dropped, and its letting go, should it come
  back, changes nothing the consumer sees: a consumer sees one ending.
- A session holds no cancel scope across its ``yield``: it may be entered in one task and left in another.
- ``interrupt(error)`` (the server stops) ends the consumer's side at its next event: what arrived, then
  ``Failed`` of ``error`` in-band unless an ending came first; its decode is told to stop.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
import time
from typing import Any, Callable

import trio

from ..events import (Failed, Finished, KeepAlive, ReasoningDelta, Started, TextDelta, Timing, TokenEvent,
                      ToolCallArgsDelta)
from .admission import Place
from .prompt.prepare import Prepared
from .decode.token_events import DecodeLoop



FOLDED_INTERVAL = 0.25  # a consumer that folds the whole answer (no stream) reads none early: a batch per 0.25 s

_MERGEABLE = (TextDelta, ReasoningDelta, ToolCallArgsDelta)


def merge_deltas(events: list[TokenEvent]) -> list[TokenEvent]:
    """Adjacent deltas of one channel (and one tool call) become one event; nothing else changes."""
    out: list[TokenEvent] = []
    for ev in events:
        last = out[-1] if out else None
        if (isinstance(ev, _MERGEABLE) and type(last) is type(ev)
                and getattr(ev, "index", None) == getattr(last, "index", None)):
            more = {"logprobs": last.logprobs + ev.logprobs} if isinstance(ev, TextDelta) else {}  # (tokens' figures)
            out[-1] = dataclasses.replace(last, text=last.text + ev.text, **more)
        else:
            out.append(ev)
    return out


def _ends(box: "Mailbox", batch: list[TokenEvent]) -> bool:
    return box.closed or any(isinstance(ev, (Finished, Failed)) for ev in batch)


class Mailbox:
    """Events from the model thread to the trio side: the thread appends to a deque and schedules a wake-up
    only while the trio side waits in ``wait`` and the event is due (one wake-up at a time); the trio side
    drains everything that has arrived. Due: an ending at once, anything else once the consumer's ``due``
    time has come (the next batch of a stream) — the model thread decides as it appends, so holding a batch
    back costs no timer on the trio side."""

    def __init__(self, token: trio.lowlevel.TrioToken, on_close: Callable[[], None]):
        self.on_close = on_close  # called on the trio side once the model thread let go (or it was abandoned)
        self.queue: collections.deque[TokenEvent] = collections.deque()
        self.token = token
        self.stop = threading.Event()  # set by the trio side: the consumer is gone
        self.wake_pending = False
        self.listening = False  # the trio side waits in ``wait`` ...
        self.due = -math.inf  # ... for an event from this time on (``time.monotonic``), or an ending
        self.ending_soon = False  # model thread: the generation ends, what arrived is due (``flush``)
        self.arrived = trio.Event()
        self.closed = False  # trio side: the model thread let go, or the generation was abandoned
        self.let_go = False  # model thread side: close() was called
        self.error: BaseException | None = None  # a failure before decoding began (the model would not load)
        self._lock = threading.Lock()  # the model thread's events and a watchdog's abandon: one order
        self.sent = False  # an event went out (Started first: the stream may be open)
        self.ended = False  # an ending (Finished, Failed) went out
        self.abandoned = False  # the consumer's side was ended without the model thread (``abandon``)
        self.finished = trio.Event()
        self.admission_wait_s: float | None = None  # how long the session waited for its slot
        self.loop: DecodeLoop | None = None  # the loop feeding it: what was decoded for a consumer that left early

    def open_loop(self, parser: Any, prepared: Prepared, load_s: float | None = None) -> DecodeLoop:
        """The generation's DecodeLoop, emitting into this mailbox, its timing begun with what came before
        decoding (the wait for a slot, the template, tokenizing, a model load)."""
        before = Timing(admission_wait_s=self.admission_wait_s, load_s=load_s, render_s=prepared.render_s,
                        tokenize_s=prepared.tokenize_s)
        self.loop = DecodeLoop(parser, prepared.req.stop, self.emit, prepared.sampling, before, self.flush)
        return self.loop

    # model thread
    def emit(self, ev: TokenEvent) -> None:
        with self._lock:
            if self.abandoned:  # its consumer's side has ended already (see the rules)
                return
            self.queue.append(ev)
            self.sent = True
            self.ended = self.ended or isinstance(ev, (Finished, Failed))
            wake = self._claim_wake(self.ending_soon or self.ended or time.monotonic() >= self.due)
        if wake:
            self._wake_soon()

    def flush(self) -> None:
        """Its generation ends: what arrived is due now, before the model thread's work of letting go of it
        (keeping its cache for the next turn, its Finished): the answer's last text is not held back by it."""
        with self._lock:
            self.ending_soon = True
            wake = self._claim_wake(bool(self.queue))
        if wake:
            self._wake_soon()

    def _claim_wake(self, due: bool) -> bool:
        """(Under the lock.) Whether to wake the trio side: it waits, no wake-up is on its way, ``due``."""
        wake = due and self.listening and not self.wake_pending
        self.wake_pending = self.wake_pending or wake
        return wake

    def _wake_soon(self) -> None:
        try:
            self.token.run_sync_soon(self._wake)
        except trio.RunFinishedError:
            self.stop.set()

    def close(self, error: BaseException | None = None) -> None:
        """The model thread is done with this generation (and will not touch it again): called once, where the
        generation ends (``Row.end`` for a decoder's row; the job's end for a backend that decodes whole)."""
        assert not self.let_go, "a generation is let go of once"
        with self._lock:
            self.let_go = True
            if not self.abandoned:  # the consumer was told already
                self.error = error
        self._close_soon()

    # any thread
    def abandon(self, error: BaseException) -> None:
        """End the consumer's side without the model thread, which may never come back to (a group's watchdog:
        lockstep.py): ``error`` in-band (Failed) once an event went out, else the consumer's exception, as
        ``Row.end`` would report it; the place goes back. Nothing once the model thread let go or an ending
        went out; what the model thread sends after is dropped (see the rules)."""
        with self._lock:
            if self.let_go or self.ended or self.abandoned:
                return
            self.abandoned = True
            if self.sent:
                self.queue.append(Failed.in_generation(error))
                self.ended = True
            else:
                self.error = error
        self._close_soon()

    # trio side
    def _wake(self) -> None:
        self.wake_pending = False
        self.arrived.set()

    def _close_soon(self) -> None:
        """``_close`` on the trio side (nothing to do once its run has finished)."""
        try:
            self.token.run_sync_soon(self._close)
        except trio.RunFinishedError:
            pass

    def _close(self) -> None:
        if self.closed:  # abandoned first: the model thread let go after
            return
        self.on_close()
        self.closed = True
        self.arrived.set()
        self.finished.set()

    def drain(self) -> list[TokenEvent]:
        out = []
        while self.queue:
            out.append(self.queue.popleft())
        return out

    async def wait(self, timeout: float, due: float = -math.inf) -> bool:
        """Wait until something due arrived: an ending, or anything once ``time.monotonic()`` reaches ``due``
        (what arrived before waits for it: it is told with the first event from then on), or the thread let go.
        False when ``timeout`` passed first with nothing arrived."""
        self.arrived = trio.Event()
        with self._lock:  # the model thread appends and reads ``listening`` under it: no event is missed
            if self.closed or self.ended or (self.queue and (self.ending_soon or time.monotonic() >= due)):
                return True
            self.listening, self.due = True, due
        try:
            if timeout == math.inf:  # no keep-alive: no cancel scope to open and close at every wake-up
                await self.arrived.wait()
                return True
            with trio.move_on_after(timeout):
                await self.arrived.wait()
                return True
            return bool(self.queue)  # the keep-alive time passed with events held: they go out now
        finally:
            with self._lock:
                self.listening = False


class Session:
    """A generation as its consumer sees it: ``prepared`` (the prompt, known before any event) and the
    TokenEvents, as an async iterator. Made and ended by ``Engine.session`` only."""

    def __init__(self, prepared: Prepared, place: Place, start: Callable[[Mailbox], None],
                 keepalive: float | None, every: float = 0.0):
        self.prepared = prepared
        self._every = every  # after the first batch of deltas (sent at once), at most one per ``every`` seconds
        self._place = place
        self._start = start
        self._keepalive = keepalive
        self._out: collections.deque[TokenEvent] = collections.deque()
        self._box: Mailbox | None = None
        self._quiet = 0.0
        self._last_batch = -math.inf
        self._done = False
        self._interrupted: Exception | None = None
        self._waiting: trio.CancelScope | None = None  # around the wait for a decode slot

    @property
    def prompt_tokens(self) -> int:
        return len(self.prepared.tokens)

    @property
    def decoded(self) -> tuple[int, int]:
        """(completion, reasoning) tokens decoded so far: final once the session has ended, also for a
        consumer that left before Finished (what the metrics count for a cancelled stream)."""
        loop = self._box.loop if self._box is not None else None
        return (loop.completion_tokens, loop.reasoning_tokens) if loop is not None else (0, 0)

    def __aiter__(self) -> "Session":
        return self

    async def __anext__(self) -> TokenEvent:
        while not self._out:
            if self._done:
                raise StopAsyncIteration
            await self._advance()
        return self._out.popleft()

    def _idle(self) -> None:
        self._quiet += self._keepalive or 0.0
        self._out.append(KeepAlive(self._quiet))

    def begin(self) -> None:
        """Start decoding now where a decode slot is free, before the consumer asks for the first event: the
        model reads the prompt while a stream's response headers go out. Otherwise the first event waits for a
        slot, as any later one would."""
        if self._box is None and self._place.take_now():
            self._open()

    def _open(self) -> None:
        self._box = Mailbox(trio.lowlevel.current_trio_token(), self._place.give_back)
        self._box.admission_wait_s = self._place.waited_s
        self._start(self._box)
        self._quiet = 0.0

    def interrupt(self, error: Exception) -> None:
        """End the consumer's side at its next event, with ``error`` in-band (see the rules)."""
        if self._done or self._interrupted is not None:
            return
        self._interrupted = error
        if self._box is not None:
            self._box.stop.set()
            self._box.arrived.set()  # (a consumer waiting for events looks again)
        if self._waiting is not None:
            self._waiting.cancel()

    async def _advance(self) -> None:
        timeout = self._keepalive or math.inf
        if self._interrupted is not None:
            batch = self._box.drain() if self._box is not None else []
            self._out.extend(merge_deltas(batch))
            if not any(isinstance(ev, (Finished, Failed)) for ev in batch):
                self._out.append(Failed.in_generation(self._interrupted))
            self._done = True
            return
        if self._box is None:
            with trio.CancelScope() as self._waiting:
                got = await self._place.wait(timeout)
            self._waiting = None
            if self._interrupted is not None:
                return
            return self._open() if got else self._idle()
        box = self._box
        # Deltas that arrive together are merged, and after the first they go out at most every ``every``
        # seconds: a fast model's tokens cost one wake-up and one wire event per batch, not per token. What
        # arrives before that goes with the first event after it (the model thread tells, no timer), and an
        # ending goes at once: the last tokens are not held back.
        if not await box.wait(timeout, self._last_batch + self._every):
            return self._idle()
        self._quiet = 0.0
        batch = box.drain()
        if _ends(box, batch):
            await box.finished.wait()  # imminent: once the end is out, the model thread lets go
        if batch:
            if not all(isinstance(ev, Started) for ev in batch):  # Started alone does not delay the first token
                self._last_batch = time.monotonic()
            self._out.extend(merge_deltas(batch))
        if box.closed and not box.queue:
            self._done = True
            if box.error is not None and not batch:
                raise box.error

    async def _end(self) -> None:
        """Stop the decode and wait until the model thread let go of it (which gives the place back); a
        session that never started decoding gives its place back here."""
        if self._box is None:
            self._place.give_back()
            return
        self._box.stop.set()
        with trio.CancelScope(shield=True):
            await self._box.finished.wait()
