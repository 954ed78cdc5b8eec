"""Several answers to one request (OpenAI's ``n``; legacy Completions' list of prompts): one ChatRequest per
choice, each run in an engine session of its own, all at once, so they decode as rows of the same batch.

Rules:
- Choice ``i`` is answered by a machine of its own whose templates read ``choice`` = ``i`` (the chunks'
  ``index``); every machine shares the response's id and created time.
- A seeded request's choice ``i`` samples with ``seed + i``: each choice differs from the others, and the
  request made again draws the same choices.
- The choices of one prompt share its reading: the first reads it and keeps its KV cache in the prompt cache
  where it ends (``ChatRequest.shared_prompt``; handed to the others outside it where the cache will not hold
  it, until the request ends); the others' sessions open once it has, and their rows read its last token alone.
  Streamed, those open inside the stream: the choices' sessions are admitted as a unit (``Engine.unit``: the
  first's admission takes every choice's place, all or none, the refusal the answer's status; each other one
  takes its place, never refused as overloaded).
- The request's end is one engine call, ``Engine.end_unit``, however it ended, once its choices' sessions have:
  the places none took go back, and the prompts handed on go.
- Streamed: each choice's chunks go out as they come, interleaved; each choice's own usage chunk is held back and
  one, summed, closes the stream (before the one terminal). A failure in one choice sends its error chunk and
  ends the stream, the others stopped.
- Not streamed: admitted as a stream is (as a unit: a 429 before any choice ran, never after one did); each
  choice's chunks folded as a lone answer's are, the folds' choices listed in order, and one usage: prompt tokens
  (and cached ones) counted once per prompt, as OpenAI counts them; completion tokens (and reasoning ones) summed
  over the choices. A failure in one choice is the answer's error, the others stopped.
- The request's record (its log line, /metrics) counts every choice's tokens, each prompt's once: one request.
- More choices than the server ever holds at once (decode slots and ``--max-queue``) are refused as the client's
  error (400, naming ``n``, else ``prompt``, with the most it takes), not as a full queue: a retry never fits.
"""

from __future__ import annotations

from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import trio

from ..chat_request import ChatRequest
from ..errors import invalid
from ..events import Failed, KeepAlive, Started
from ..observe.turn import beside, failed, watch
from ..speclang.machine import WireEvent, pump
from .failure import refusal_or_failure
from .wire import Reply


@dataclass(frozen=True)
class Choice:
    req: ChatRequest
    prompt: int = 0  # which of the request's prompts it answers: its prompt tokens count once per prompt
    context: dict = field(default_factory=dict)  # what its machine's templates read for it alone (its prompt's text)


def copies(req: ChatRequest, n: int, prompt: int = 0, first: int = 0, **context: Any) -> list[Choice]:
    """``n`` choices of one prompt, the first numbered ``first``: a seed moves on by the choice's index."""
    return [Choice(req if req.seed is None else req.with_(seed=req.seed + first + j), prompt, context)
            for j in range(n)]


def summed(usages: list[tuple[int, dict]]) -> dict:
    """Each choice's usage (with its prompt's index) as one: prompt tokens once per prompt, the rest summed."""
    prompts: dict[int, dict] = {}
    for prompt, usage in usages:
        prompts.setdefault(prompt, usage)

    def total(usages: Any, key: str, detail: str | None = None) -> int:
        return sum(((u.get(key) or {}).get(detail) or 0) if detail else u.get(key) or 0 for u in usages)

    every = [u for _, u in usages]
    prompt_tokens, completion_tokens = total(prompts.values(), "prompt_tokens"), total(every, "completion_tokens")
    out = {**every[0], "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens}
    if isinstance(every[0].get("prompt_tokens_details"), dict):
        cached = total(prompts.values(), "prompt_tokens_details", "cached_tokens")
        out["prompt_tokens_details"] = {**every[0]["prompt_tokens_details"], "cached_tokens": cached}
    if isinstance(every[0].get("completion_tokens_details"), dict):
        reasoning = total(every, "completion_tokens_details", "reasoning_tokens")
        out["completion_tokens_details"] = {**every[0]["completion_tokens_details"], "reasoning_tokens": reasoning}
    return out


def _usage_alone(wire: WireEvent) -> dict | None:
    """A chunk that carries usage and no choice (the stream's last before the terminal): its usage."""
    d = wire.data
    return d["usage"] if isinstance(d, dict) and d.get("usage") and d.get("choices") == [] else None


def refuse_past_capacity(proto, v, choices: list[Choice]) -> None:
    """More choices than the server ever holds at once (its decode slots and ``--max-queue`` waiting) is the
    client's error, named by the field that asked for them: a 429 would be retried for ever."""
    capacity = proto.engine.capacity  # (the bound checked and its parts, one value: the sentence adds up)
    most = capacity.most
    if len(choices) <= most:
        return
    n = v.body.get("n") or 1
    asked = f"'n' is {n}" if n > 1 else f"'prompt' has {len(choices)} prompts"
    if n > 1 and len(choices) > n:
        asked += f" for each of {len(choices) // n} prompts"
    raise invalid(f"{asked}: {len(choices)} choices, more than this server can ever take at once ({most}: "
                  f"{capacity.decoding} decoding and --max-queue {capacity.waiting} waiting); ask for "
                  f"at most {most} choices in one request", param="n" if n > 1 else "prompt", code="invalid_value")


async def respond_choices(proto, v, choices: list[Choice]) -> Reply:
    """Answer a request of several choices (see the rules), for ``proto`` (an OpenAI protocol's ``Protocol``)."""
    refuse_past_capacity(proto, v, choices)
    keepalive = proto.spec.extra.get("keepalive_seconds")
    stream = bool(v.body.get(proto.stream_field))
    machines = []
    for i, choice in enumerate(choices):
        machine = proto.machine(v, choice.req.model, stream)
        if machines:  # one response: one id, one created time
            machine.context.update(id=machines[0].context["id"], created=machines[0].context["created"])
        machine.context.update(choice.context, choice=i)
        machines.append(machine)
    reqs = [c.req.with_(response_id=machines[0].context["id"]) for c in choices]
    # each prompt's first choice reads it; the others wait until it has (their rows then read its last token alone)
    leads = {c.prompt: i for i, c in reversed(list(enumerate(choices)))}
    ready = {p: trio.Event() for p in leads if sum(c.prompt == p for c in choices) > 1}
    for i, c in enumerate(choices):
        if c.prompt in ready:
            reqs[i] = reqs[i].with_(shared_prompt=True)

    def waits(i: int) -> trio.Event | None:  # what a choice's session waits for before it opens (None: nothing)
        p = choices[i].prompt
        return ready[p] if p in ready and leads[p] != i else None

    def tapped(i: int, session):  # the request's record sees its first choice, and counts the others' tokens
        p = choices[i].prompt  # (each prompt's once); a lead's read tells the others
        events = watch(session, reqs[i], stream) if i == 0 else beside(session, prompt=leads[p] == i)
        return _reading(events, ready[p]) if p in ready and leads[p] == i else events

    unit = proto.engine.unit(len(choices), reqs[0].response_id)  # (each choice's session is opened with it)
    if stream:  # (the prompts' sessions are open before the stream is: a refusal is the answer's status; the
        runs = []  # first takes every choice's place, so that those opened in the stream are never refused)
        await proto.services.hold(_ending(proto.engine, unit))
        for i, (req, machine) in enumerate(zip(reqs, machines)):
            if waits(i) is not None:  # opened in the stream, once its prompt is read
                machine.context.setdefault("prompt_tokens", machines[leads[choices[i].prompt]].context["prompt_tokens"])
                runs.append((machine, beside(_Later(proto, req, keepalive, waits(i), unit), prompt=False)))
                continue
            # (a later prompt's first choice takes a place its unit holds: never refused)
            session = await proto.services.hold(proto.engine.session(req, keepalive, unit=unit))
            machine.context.setdefault("prompt_tokens", session.prompt_tokens)
            runs.append((machine, tapped(i, session)))
        return Reply.of_stream(_streamed(proto, runs, [c.prompt for c in choices]), proto.spec.content_type)
    bodies: list[Any] = [None] * len(choices)
    errors: list[Exception] = []

    async def fold(i: int, session) -> None:
        machines[i].context.setdefault("prompt_tokens", session.prompt_tokens)
        bodies[i] = (await proto.answer(v, machines[i], tapped(i, session))).body

    async def folded(i: int, nursery: trio.Nursery, first=None) -> None:
        try:
            if first is not None:
                return await fold(i, first)
            if waits(i) is not None:
                await waits(i).wait()
            # (a place its unit holds: never refused)
            async with proto.engine.session(reqs[i], keepalive, streamed=False, unit=unit) as session:
                await fold(i, session)
        except Exception as exc:  # the answer's error (the first), the other choices stopped
            errors.append(exc)
            nursery.cancel_scope.cancel()

    try:  # the first choice's session takes every choice's place (all or none: a 429 before any ran)
        async with proto.engine.session(reqs[0], keepalive, streamed=False, unit=unit) as first:
            async with trio.open_nursery() as nursery:
                for i in range(len(choices)):
                    nursery.start_soon(folded, i, nursery, first if i == 0 else None)
    finally:
        proto.engine.end_unit(unit)
    if errors:
        raise errors[0]
    body = {**bodies[0], "choices": [b["choices"][0] for b in bodies]}
    if bodies[0].get("usage"):
        body["usage"] = summed([(c.prompt, b["usage"]) for c, b in zip(choices, bodies)])
    return Reply(body)


@asynccontextmanager
async def _ending(engine, unit) -> AsyncIterator[None]:
    """Held for the whole HTTP request of a stream (entered before its sessions, so left after them): the request
    of ``unit`` ends once it does, however (a client that left before the body too)."""
    try:
        yield
    finally:
        engine.end_unit(unit)


async def _reading(events, ready: trio.Event) -> AsyncIterator:
    """A prompt's first choice's events, ``ready`` set once its prompt is read (its first event after Started: the
    row has sampled, and kept its prompt's cache for the others) or it ended."""
    try:
        async for ev in events:
            if not isinstance(ev, (Started, KeepAlive)):
                ready.set()
            yield ev
    finally:
        ready.set()


class _Later:
    """A choice's events from a session opened once ``ready`` (its prompt read by the prompt's first choice); what
    that session decoded (``decoded``), for the request's record of a client that hangs up."""

    def __init__(self, proto, req: ChatRequest, keepalive, ready: trio.Event, unit):
        self.session = None
        self._events = self._run(proto, req, keepalive, ready, unit)

    @property
    def decoded(self) -> tuple[int, int]:
        return self.session.decoded if self.session is not None else (0, 0)

    def __aiter__(self) -> AsyncIterator:
        return self._events

    async def aclose(self) -> None:
        await self._events.aclose()

    async def _run(self, proto, req: ChatRequest, keepalive, ready: trio.Event, unit) -> AsyncIterator:
        await ready.wait()  # (a place its unit holds: never refused)
        async with proto.engine.session(req, keepalive, unit=unit) as self.session:
            async for ev in self.session:
                yield ev


async def _failing_in_band(events, shown) -> AsyncIterator:
    """A choice's token events, an exception among them ending it as the protocol's ``Failed`` (its error chunk);
    a failure, either way, is the request's in its record (``shown``: its code as the protocol words it), as a lone
    stream's is: the other choices, stopped by it, do not make it a client that left."""
    try:
        async for ev in events:
            if isinstance(ev, Failed):
                failed(ev, shown(ev))
            yield ev
    except Exception as exc:
        ending = refusal_or_failure(exc)
        failed(ending, shown(ending))
        yield ending
    finally:  # (a choice's own session, opened late, is left here, in the task that opened it)
        if hasattr(events, "aclose"):
            await events.aclose()


@trio.as_safe_channel
async def _interleaved(runs: list, shown) -> AsyncIterator[tuple[int, WireEvent]]:
    """Each choice's wire events, with its index, as they come (``shown``: a failure's code, in the protocol's
    words)."""
    send, receive = trio.open_memory_channel(0)

    async def one(i: int, machine, events, out) -> None:
        async with out:  # (nothing raised here: what goes wrong is sent, and raised where the stream is read)
            try:
                async with aclosing(pump(machine, _failing_in_band(events, shown))) as wires:
                    async for wire in wires:
                        await out.send((i, wire))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the reader is gone (the stream ended)
            except Exception as exc:
                await out.send((i, exc))

    async with trio.open_nursery() as nursery:
        for i, (machine, events) in enumerate(runs):
            nursery.start_soon(one, i, machine, events, send.clone())
        send.close()
        async with receive:
            async for item in receive:
                yield item


async def _streamed(proto, runs: list, prompts: list[int]) -> AsyncIterator[bytes]:
    framing = proto.spec.framing
    usages: dict[int, tuple[int, dict]] = {}  # choice -> (its prompt, its usage): summed in the choices' order,
    last: dict | None = None  # as not streamed (a prompt's first choice's cached tokens), whichever ends first
    async with _interleaved(runs, proto.shown) as wires:
        async for i, wire in wires:
            if isinstance(wire, Exception):
                raise wire
            if isinstance(wire.data, str):  # a choice's terminal: the stream's one goes last
                continue
            if (usage := _usage_alone(wire)) is not None:
                usages[i] = (prompts[i], usage)
                last = wire.data
                continue
            yield wire.encode(framing)
            if isinstance(wire.data, dict) and "error" in wire.data:
                break
    if last is not None and len(usages) == len(runs):
        yield WireEvent(None, {**last, "usage": summed([usages[i] for i in sorted(usages)])}).encode(framing)
    terminal = runs[0][0].terminal
    if terminal is not None:
        yield terminal.encode(framing)
