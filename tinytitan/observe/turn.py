"""One HTTP request's record, filled in as it goes: by the HTTP layer (method, path, status, client), by the
protocol path (model, tools) and by the TokenEvents it streamed (usage, first token, stop reason, and the
engine's timing on ``Finished``).

Rules:
- A record never holds prompt or answer text: counts, names of things the operator configured (models,
  routes) and timings only. Tool names go to the debug log, never into a record.
- ``watch(events, req, stream)`` taps a generation's event stream for the request being answered (the
  record lives in a context variable set for the whole ASGI call); outside a server it changes nothing.
  ``asked(model)`` names the model of a request before any generation; ``note(model, usage)`` counts a
  generation that had no stream to tap; ``passes(usage)`` the summary passes a request ran beside the generation
  it streams; ``beside(events, prompt)`` taps another generation of the same request (another of its choices),
  whose counts are added whenever it ends (what it decoded, where it never finished: the client left). A
  request's counts are all of its generations' together: one request, not one per generation.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterable

from ..events import (Failed, Finished, ReasoningDelta, Started, TextDelta, Timing, TokenEvent,
                      ToolCallStarted, Usage)

current_turn: contextvars.ContextVar["Turn | None"] = contextvars.ContextVar("tinytitan_turn", default=None)

_FIRST_OUTPUT = (ReasoningDelta, TextDelta, ToolCallStarted)
PARTS_OF_STEPS = frozenset({"grammar_mask_s"})  # Timing fields already counted inside another step's time


@dataclass
class Turn:
    method: str
    path: str
    client: str
    user_agent: str
    started: float = field(default_factory=time.time)  # wall clock, for display
    t0: float = field(default_factory=time.perf_counter)
    request_id: str = ""
    route: str = "unmatched"
    protocol: str = "none"
    routed: bool = False  # route and protocol are the framework's match (the observer's ``routed``)
    status: int | None = None
    # the generation, where there was one
    model: str | None = None
    stream: bool | None = None
    tool_names: tuple[str, ...] = ()
    generated: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    first_output_at: float | None = None
    stop_reason: str | None = None
    error: str | None = None  # why it was refused or failed: the error's code (else its type), as the client saw it
    error_param: str | None = None  # the field the error names, where it names one
    timing: Timing | None = None
    duration: float | None = None
    on_change: Any = None  # called when the queue may have moved (the observer's live push)
    source: Any = None  # the tapped session: what it decoded, for a generation that never finished
    tapped: bool = False  # its generation's events go through the tap (``tap``)
    cache_miss: dict | None = None  # where its prompt parted from the prompt cache, and why (engine/cache/miss.py)
    passes: Usage = field(default_factory=Usage)  # generations beside the tapped one (summary passes), summed
    began: bool = False  # its generation's Started came through the tap
    besides: list = field(default_factory=list)  # the generations tapped beside it (``beside``), ended or not

    # -- fed by the event tap --------------------------------------------------------------------------
    def see(self, ev: TokenEvent) -> None:
        if isinstance(ev, Started):
            self.began = True
            self.prompt_tokens = ev.prompt_tokens + self.passes.prompt_tokens
            self.cached_tokens = ev.cached_tokens + self.passes.cached_tokens
            self.cache_miss = getattr(getattr(self.source, "prepared", None), "cache_miss", None)
            if self.on_change:
                self.on_change()
        elif isinstance(ev, _FIRST_OUTPUT):
            if self.first_output_at is None:
                self.first_output_at = time.perf_counter()
        elif isinstance(ev, Finished):
            u = ev.usage + self.passes
            self.prompt_tokens, self.cached_tokens = u.prompt_tokens, u.cached_tokens
            self.completion_tokens, self.reasoning_tokens = u.completion_tokens, u.reasoning_tokens
            self.stop_reason = ev.reason
            self.timing = ev.timing
        elif isinstance(ev, Failed):
            self.stop_reason = "error"
            self.error = ev.code or ev.type  # (as a refused request's: its code, else its kind)

    def add(self, usage: Usage, read: bool | None = None) -> None:
        """A generation beside the tapped one ended (before or after it): its counts the request's too. ``read``:
        whether the request's counts already took the passes in (by default, once its Started came through)."""
        self.passes = self.passes + usage
        if self.began if read is None else read:  # (counts read so far took the passes as they were: this one is
            # added to them as well)
            self.prompt_tokens += usage.prompt_tokens
            self.cached_tokens += usage.cached_tokens
            self.completion_tokens += usage.completion_tokens
            self.reasoning_tokens += usage.reasoning_tokens

    def cancelled(self) -> None:
        """The client left before Finished: the tokens decoded for it still count (read once the session
        has ended, so the count is final)."""
        self.stop_reason = "cancelled"
        self.count_decoded()

    def count_decoded(self) -> None:
        """A generation with no Finished (the client left, or it failed after it started): the tokens it
        decoded count, as they would have on Finished."""
        decoded = getattr(self.source, "decoded", None)
        done, thought = decoded if isinstance(decoded, tuple) else (0, 0)
        if not self.began:  # it ended before Started (the client left while it waited for a slot, or during its
            # prefill): its prompt was rendered and tokenized all the same (the session knows its length)
            prompt = getattr(self.source, "prompt_tokens", None)
            self.prompt_tokens = (prompt if isinstance(prompt, int) else 0) + self.passes.prompt_tokens
        # (summary passes that finished before the hang-up count whatever the tapped generation decoded)
        self.completion_tokens = done + self.passes.completion_tokens
        self.reasoning_tokens = thought + self.passes.reasoning_tokens

    def count_unfinished(self) -> None:
        """The generations beside the tapped one that never finished (the client left, or another choice failed,
        and they were stopped): what they decoded counts, as it would have on their Finished (their prompt's
        tokens where theirs count), read once their sessions ended. The request did not finish either, whatever
        its tapped one did: cut, as a lone generation the client left is (``cancelled``), else failed."""
        for other in self.besides:
            if other.finished:
                continue
            if self.stop_reason != "error":
                self.stop_reason = "error" if self.error is not None else "cancelled"
            other.finished = True
            done, thought = other.decoded
            # (the request's counts were read already: on its tapped generation's Finished, or from what it decoded)
            self.add(Usage(other.prompt_tokens if other.prompt else 0, 0, done, thought), read=True)

    # -- read by the observer ----------------------------------------------------------------------------
    @property
    def cache_reason(self) -> str | None:
        return (self.cache_miss or {}).get("reason")

    @property
    def ttft(self) -> float | None:
        return None if self.first_output_at is None else self.first_output_at - self.t0

    @property
    def tokens_per_second(self) -> float | None:
        t = self.timing
        if t is None or not t.decode_s or t.decode_tokens <= 0:
            return None
        return t.decode_tokens / t.decode_s

    def profile(self) -> dict | None:
        """The per-turn timing snapshot (``/profile``): where the request's wall time went."""
        t = self.timing
        if t is None:
            return None
        parts = dataclasses.asdict(t)
        parts["cached_tokens"] = self.cached_tokens - self.passes.cached_tokens  # (of the timed generation)
        parts["cache_miss"] = self.cache_miss
        # the steps, each once: the grammar mask runs inside prefill and decode steps, so it is a part of
        # their time, not a step beside them
        spent = sum(v for k, v in parts.items() if k.endswith("_s") and k not in PARTS_OF_STEPS and v)
        parts["total_s"] = self.duration
        # what the engine's steps do not cover: HTTP, validation, the protocol machine, sending
        parts["other_s"] = None if self.duration is None else max(self.duration - spent, 0.0)
        return parts

    def as_dict(self) -> dict:
        return {
            "id": self.request_id, "time": self.started, "method": self.method, "path": self.path,
            "route": self.route, "protocol": self.protocol, "status": self.status, "client": self.client,
            "model": self.model, "stream": self.stream, "tools": len(self.tool_names),
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens, "reasoning_tokens": self.reasoning_tokens,
            "draft_tokens": self.timing.draft_tokens if self.timing else 0,
            "draft_accepted_tokens": self.timing.draft_accepted_tokens if self.timing else 0,
            "ttft_s": self.ttft, "tokens_per_second": self.tokens_per_second, "stop_reason": self.stop_reason,
            "duration_s": self.duration, "profile": self.profile(), "cache_miss": self.cache_miss,
        }


def watch(events: AsyncIterable[TokenEvent], req: Any, stream: bool | None = None) -> AsyncIterable[TokenEvent]:
    """Tap a generation's events for the request being answered (unchanged when there is none). The tap
    owns nothing: whoever owns ``events`` (the engine session) still ends them."""
    turn = current_turn.get()
    if turn is None:
        return events
    turn.generated = True
    turn.model = getattr(req, "model", None)
    turn.tool_names = tuple(t.name for t in getattr(req, "tools", ()))
    turn.stream = stream
    turn.source, turn.tapped = events, True
    return _Tap(events, turn)


def asked(model: str) -> None:
    """The served model the request being answered is for, known before its generation is (a request refused
    on the way, a prompt past the window or a full queue, is logged with it)."""
    turn = current_turn.get()
    if turn is not None:
        turn.model = model


def note(model: str, usage: Any, reason: str = "stop") -> None:
    """A generation the request ran without an event stream to tap (a Responses compaction's summary
    passes, whose usage comes back summed): counted for the request being answered, like a tapped one; a
    request that notes several (one per trace summarised) counts them all."""
    turn = current_turn.get()
    if turn is None:
        return
    turn.generated, turn.model = True, model
    passes(usage)
    turn.see(Finished(reason, Usage()))


def failed(ev: Failed, shown: str | None = None) -> None:
    """The request being answered ended its stream with ``ev`` (one the tap saw, or one that never came through
    it: the model would not load once the stream was open): noted as the tap notes one; ``shown``: its code, else
    its type, in the protocol's words (as a refused request's is: Messages' ``api_error``)."""
    turn = current_turn.get()
    if turn is not None:
        turn.see(ev)
        turn.error = shown or turn.error


def reading(session: Any | None) -> None:
    """The engine session a tapped stream goes on to read (a compacted turn's reply, after its summary pass): what
    it decoded counts for a client that hangs up, as a tapped session's does. ``None``: none yet (the summary pass
    ended, its tokens counted by ``passes``; the reply's session not open): nothing decoded to count."""
    turn = current_turn.get()
    if turn is not None and turn.tapped:
        turn.source = session


def passes(usage: Usage) -> None:
    """Summary passes the request being answered ran beside its tapped generation (a Responses turn compacted
    on the way: the summary's own Finished never reaches the tap): added to the request's counts."""
    turn = current_turn.get()
    if turn is not None:
        turn.passes = turn.passes + usage


def beside(events: AsyncIterable[TokenEvent], prompt: bool = True) -> AsyncIterable[TokenEvent]:
    """Tap another generation of the request being answered, beside its ``watch``ed one (another of its choices):
    its counts, once it finishes, are the request's too (its prompt's only where ``prompt``: a prompt that several
    choices share counts once). Unchanged when there is no request."""
    turn = current_turn.get()
    return events if turn is None else _Beside(events, turn, prompt)


class _Beside:
    def __init__(self, events: AsyncIterable[TokenEvent], turn: Turn, prompt: bool):
        self._source, self._events = events, events.__aiter__()
        self._turn, self.prompt = turn, prompt
        self.finished = False  # its Finished was counted (else ``Turn.count_unfinished`` counts what it decoded)
        turn.besides.append(self)

    def __aiter__(self) -> "_Beside":
        return self

    async def __anext__(self) -> TokenEvent:
        ev = await self._events.__anext__()
        if isinstance(ev, Finished) and not self.finished:
            self.finished = True
            u = ev.usage
            self._turn.add(u if self.prompt else Usage(0, 0, u.completion_tokens, u.reasoning_tokens))
        return ev

    @property
    def decoded(self) -> tuple[int, int]:
        """(completion, reasoning) tokens its session decoded so far (none before it opened)."""
        decoded = getattr(self._source, "decoded", None)
        return decoded if isinstance(decoded, tuple) else (0, 0)

    @property
    def prompt_tokens(self) -> int:
        prompt = getattr(self._source, "prompt_tokens", None)
        return prompt if isinstance(prompt, int) else 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


class _Tap:
    def __init__(self, events: AsyncIterable[TokenEvent], turn: Turn):
        self._events = events.__aiter__()
        self._turn = turn

    def __aiter__(self) -> "_Tap":
        return self

    async def __anext__(self) -> TokenEvent:
        ev = await self._events.__anext__()
        self._turn.see(ev)
        return ev

    def __getattr__(self, name: str) -> Any:  # the session's own attributes (prompt_tokens …)
        return getattr(self._events, name)
