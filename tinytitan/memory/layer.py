"""The memory layer: the engine, decorated so a request can use memory tools the server runs itself.

Rules:
- ``session(req)`` is the engine's, for a request with a memory session (see service.py) decorated: the
  request gets the session's bootstrap fragment and the memory tools, and its events are rounds.
- Each generation is a round. Memory calls (calls of the tools the layer added) are held back from the
  client: their events never leave, and their index numbers are taken out of the client's. A round that ends
  in memory calls only has them run here, their results appended to the conversation, and a continuation
  runs: a further engine session of the same request (never refused as overloaded; it waits its turn, so
  another request may decode between rounds).
- A round that calls a client tool ends the loop and returns that call (memory calls beside it are run, their
  results not shown to anyone). So does a round with no call, a cut (``length``), or a failure.
- ``Started`` goes out once; ``Finished`` goes out once, at the end, with the usage and the timing of every
  round summed.
- At most ``rounds`` rounds run memory calls. After the last, its calls are answered with a note that the rounds
  are used up, and the model gets one more generation (with the tools still declared, so the prompt prefix does
  not move); a memory call it makes then is dropped, and logged.
- A continuation that cannot be prepared (the conversation no longer fits) ends the answer as ``length``.
- The client's output cap (``max_tokens``) is the whole answer's: a continuation may generate only what the rounds
  before it left of it, and where nothing is left the answer ends as ``length``.
- A memory call whose markup ended early (its arguments not complete) is not run: it is answered with a tool
  error and the model goes on, as for any other bad arguments.
- What memory puts in the prompt (its fragment, its calls' results) never becomes the model's own tokens: the
  text of an added token (``<|im_end|>``) in it is broken (markup.py), for the tokenizer of the request's model.
- Memory reads and writes (the session's fragment, each memory call) run in worker threads: the database is
  never waited on from the event loop.
- Requests without a memory session (internal requests, ``-fast``, no usable workspace) get the engine's
  session untouched. A ``X-TinyTitan-Workspace`` header that names no usable workspace is the client's 400
  (``invalid_workspace``, naming the header), before anything is generated.
- A request whose answer finished is reported to the consolidator (consolidate.py), which runs as the server's
  background work (``background``): one that failed half-way (the model failed, the server stopped) or whose
  client left is not, its cut answer no conversation to learn from.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from typing import Any, AsyncIterator

import trio

from ..chat_request import ChatRequest, Message, ToolCall
from ..errors import ApiError, invalid
from ..events import (Failed, Finished, ReasoningDelta, Started, TextDelta, Timing, TokenEvent,
                      ToolCallArgsDelta, ToolCallDone, ToolCallStarted, Usage)
from .markup import Shield, added_texts
from .scope import HeaderRefused
from .service import Memory, MemorySession

log = logging.getLogger("tinytitan.memory")

USED_UP = ("(The memory tool rounds for this request are used up: answer now, without calling memory tools.)")


@dataclasses.dataclass
class _Call:
    call_id: str
    name: str
    arguments: str = ""
    complete: bool = False


class Round:
    """One generation's events: what passes to the client, and what it said and called."""

    def __init__(self, memory_tools: frozenset[str]):
        self.memory_tools = memory_tools
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.memory_calls: dict[int, _Call] = {}
        self.client_index: dict[int, int] = {}
        self.finished: Finished | None = None
        self.failed: Failed | None = None

    def feed(self, ev: TokenEvent) -> list[TokenEvent]:
        if isinstance(ev, TextDelta):
            self.text.append(ev.text)
        elif isinstance(ev, ReasoningDelta):
            self.reasoning.append(ev.text)
        elif isinstance(ev, ToolCallStarted):
            if ev.name in self.memory_tools and ev.namespace is None:
                self.memory_calls[ev.index] = _Call(ev.call_id, ev.name)
                return []
            self.client_index[ev.index] = len(self.client_index)
        elif isinstance(ev, (ToolCallArgsDelta, ToolCallDone)):
            call = self.memory_calls.get(ev.index)
            if call is None:
                return [dataclasses.replace(ev, index=self.client_index.get(ev.index, ev.index))]
            if isinstance(ev, ToolCallArgsDelta):
                call.arguments += ev.text
            else:
                call.arguments, call.complete = ev.arguments or call.arguments, ev.complete
            return []
        elif isinstance(ev, Finished):
            self.finished = ev
            return []
        elif isinstance(ev, Failed):
            self.failed = ev
        if isinstance(ev, ToolCallStarted):
            return [dataclasses.replace(ev, index=self.client_index[ev.index])]
        return [ev]

    @property
    def continues(self) -> bool:
        """Only memory calls (the turn not cut by the output cap): the server answers them and the model goes on
        (a call whose markup ended early is answered with a tool error)."""
        return (self.finished is not None and self.finished.reason == "tool_calls" and not self.client_index
                and bool(self.memory_calls))


def add_timing(a: Timing | None, b: Timing | None) -> Timing | None:
    """Two rounds' timings as one: every step's time and count summed (a step neither round had stays None)."""
    if a is None or b is None:
        return a or b
    summed = {}
    for f in dataclasses.fields(Timing):
        x, y = getattr(a, f.name), getattr(b, f.name)
        summed[f.name] = y if x is None else x if y is None else x + y
    return Timing(**summed)


def continuation(req: ChatRequest, rnd: Round, results: list[str], used_up: bool) -> ChatRequest:
    calls = list(rnd.memory_calls.values())
    history, begun = req.messages, ""
    if req.continue_final:  # the round continued a prefill: the turn it answered with is the prefill and its text
        history, begun = req.messages[:-1], req.messages[-1].content
    turn = Message("assistant", begun + "".join(rnd.text),
                   tool_calls=tuple(ToolCall(c.call_id, c.name, c.arguments) for c in calls),
                   reasoning="".join(rnd.reasoning) or None)
    answers = [Message("tool", text, tool_call_id=c.call_id, name=c.name) for c, text in zip(calls, results)]
    if used_up:
        last = answers[-1]
        answers[-1] = dataclasses.replace(last, content=f"{last.content}\n{USED_UP}")
    return req.with_(messages=history + (turn, *answers), continue_final=False)


class MemoryEvents:
    """A request's events with memory: round after round, as one stream. Made and ended by
    ``MemoryEngine.session``; continuation rounds are engine sessions of their own, entered and left here."""

    def __init__(self, engine, session: MemorySession, first, keepalive: float | None, streamed: bool = True):
        self.engine = engine
        self.session = session
        self.first = first
        self.keepalive = keepalive
        self.streamed = streamed
        self._gen = self._rounds()
        self.answer: list[str] = []  # the text the client was sent, every round
        self._counted = Usage()  # the rounds that finished
        self._decoding = first  # the round decoding now (None between rounds)
        self.finished = False  # the answer's Finished went out (a failed or cut one is not consolidated)

    @property
    def prepared(self):
        return self.first.prepared

    @property
    def prompt_tokens(self) -> int:
        return self.first.prompt_tokens

    @property
    def decoded(self) -> tuple[int, int]:
        """(completion, reasoning) tokens decoded so far, every round's (``Session.decoded``): what a client that
        hung up mid-answer is counted for."""
        done, thought = getattr(self._decoding, "decoded", (0, 0))
        return self._counted.completion_tokens + done, self._counted.reasoning_tokens + thought

    def __aiter__(self) -> "MemoryEvents":
        return self

    async def __anext__(self) -> TokenEvent:
        ev = await self._gen.__anext__()
        self.finished = self.finished or isinstance(ev, Finished)
        return ev

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def _run_calls(self, rnd: Round) -> list[str]:
        results = []
        for call in rnd.memory_calls.values():
            if not call.complete:  # its markup ended early: nothing is run on arguments that may be cut short
                results.append(json.dumps({"error": "the call's arguments were cut short (not a complete JSON "
                                                    "object); nothing was run"}))
                log.info("memory %s: tool error (arguments cut short, %d bytes)", call.name, len(call.arguments))
                continue
            text, ok = await trio.to_thread.run_sync(self.session.run, call.name, call.arguments)
            log.info("memory %s: %s (arguments %d bytes, result %d bytes)", call.name, "ok" if ok else "tool error",
                     len(call.arguments), len(text))
            results.append(text)
        return results

    async def _round(self, events, rnd: Round, started: bool) -> AsyncIterator[TokenEvent]:
        async for ev in events:
            for out in rnd.feed(ev):
                if isinstance(out, TextDelta):
                    self.answer.append(out.text)
                if not (started and isinstance(out, Started)):
                    yield out

    async def _rounds(self) -> AsyncIterator[TokenEvent]:
        session, events = self.session, self.first
        req = events.prepared.req
        usage = Usage()
        timing: Timing | None = None
        done_rounds = 0
        budget = req.max_tokens  # the client's output cap: every round's tokens count against it
        while True:
            rnd = Round(session.names)
            if done_rounds == 0:
                async with aclosing(self._round(events, rnd, False)) as out:
                    async for ev in out:
                        yield ev
            else:
                async with AsyncExitStack() as stack:
                    try:
                        events = await stack.enter_async_context(
                            self.engine.session(req, self.keepalive, continuing=True, streamed=self.streamed))
                    except ApiError as exc:  # the continuation no longer fits the context window
                        log.warning("memory: the continuation cannot run (%s); the answer ends here",
                                    exc.code or exc.kind)
                        yield Finished("length", usage, timing=timing)
                        return
                    self._decoding = events
                    async with aclosing(self._round(events, rnd, True)) as out:
                        async for ev in out:
                            yield ev
            if rnd.failed is not None or rnd.finished is None:
                return
            usage += rnd.finished.usage
            self._counted, self._decoding = usage, None
            timing = add_timing(timing, rnd.finished.timing)
            final = done_rounds >= session.rounds
            if final and rnd.memory_calls:
                log.warning("memory: the rounds are used up; %d memory call(s) of the last generation dropped",
                            len(rnd.memory_calls))
            if final or not rnd.continues:
                if rnd.memory_calls and not final and rnd.client_index:
                    await self._run_calls(rnd)  # beside a client call: run, not shown
                reason = rnd.finished.reason
                if reason == "tool_calls" and not rnd.client_index:
                    reason = "stop"
                yield Finished(reason, usage, rnd.finished.stop_sequence, timing)
                return
            done_rounds += 1
            req = continuation(req, rnd, await self._run_calls(rnd), done_rounds >= session.rounds)
            if budget is not None:
                if usage.completion_tokens >= budget:  # the cap is reached: the answer ends here
                    yield Finished("length", usage, timing=timing)
                    return
                req = req.with_(max_tokens=budget - usage.completion_tokens)


class MemoryEngine:
    """The engine with memory: ``session`` and ``count_tokens`` are decorated; everything else is the
    engine's own."""

    def __init__(self, engine, memory: Memory):
        self.inner = engine
        self.memory = memory
        self.consolidator = None
        self._shields: dict[str, Any] = {}
        if memory.config.consolidate > 0:
            from .consolidate import Consolidator

            self.consolidator = Consolidator(engine, memory, memory.config.consolidate,
                                             poll=min(1.0, memory.config.consolidate / 4))

    async def background(self) -> None:
        """What runs between requests for as long as the server serves: consolidation."""
        if self.consolidator is not None:
            await self.consolidator.run()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _memory_session(self, req: ChatRequest) -> MemorySession | None:
        """The request's memory session; none (and a log line) when memory cannot serve it: memory never fails
        a completion."""
        if not req.memory:
            return None
        try:
            session = await trio.to_thread.run_sync(self.memory.session, req)
        except HeaderRefused as exc:  # the client named its workspace wrongly: its 400, not another's memory
            raise invalid(str(exc), param="x-tinytitan-workspace", code="invalid_workspace") from None
        except Exception:
            log.exception("memory: no memory for this request")
            return None
        if session is not None:
            session.shield = self._shield(req.model)
        return session

    def _shield(self, model: str):
        """What keeps memory text from becoming the model's tokens in its prompt (markup.py), once per model."""
        if model not in self._shields:
            backend = getattr(self.inner, "backends", {}).get(model)
            self._shields[model] = Shield(added_texts(getattr(backend, "tokenizer", None)))
        return self._shields[model]

    async def count_tokens(self, req: ChatRequest) -> int:
        session = await self._memory_session(req)
        return await self.inner.count_tokens(session.augment(req) if session else req)

    @asynccontextmanager
    async def session(self, req: ChatRequest, keepalive: float | None = None, continuing: bool = False,
                      streamed: bool = True, unit: Any = None) -> AsyncIterator[Any]:
        """The engine's session, for a request with memory one that runs memory rounds (see the rules);
        ``continuing`` and ``unit`` as the engine's (a request's several choices)."""
        mem = await self._memory_session(req)
        admit = dict(continuing=continuing, unit=unit)
        if mem is None:
            async with self.inner.session(req, keepalive, streamed=streamed, **admit) as events:
                yield events
            return
        with self.memory.hold(mem.scope):
            async with self.inner.session(mem.augment(req), keepalive, streamed=streamed, **admit) as first:
                events = MemoryEvents(self.inner, mem, first, keepalive, streamed)
                try:
                    yield events
                finally:
                    await events.aclose()
                if self.consolidator is not None and events.finished:
                    await self.consolidator.seen(mem, req, "".join(events.answer))
