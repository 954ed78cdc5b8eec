"""Protocol machines compiled from a spec's ``stream`` table.

Rules (h11 style: a table, no I/O):
- The machine starts in ``stream.initial``, or in the state a named ``stream.entries`` entry gives. Each TokenEvent looks up ``states[state][EventTypeName]``;
  a pair the table does not list raises MachineError — a grammar bug is loud, never a silent skip.
- A transition runs its ``do`` hooks (the protocol's Python, for bookkeeping a table cannot say), then
  renders its ``emit`` events in order (an event with ``when: name`` only where that context value is
  truthy), then moves to ``next`` (default: stay).
- A state with no transitions is final: ``done`` is true, and feeding it anything raises.
- On a ``Failed`` event, ``error`` is the failure as the spec's ``errors.kinds`` words its kind
  (``error.type``, ``error.code``, ``error.status``, ``error.message``): an internal kind name never reaches
  the wire.
- ``emitted`` counts wire events so far (a template may use it as a sequence number); ``history`` holds
  them, each appended as it renders (a later event of the same transition can project earlier ones).
- ``fold`` turns the whole wire-event list into the non-streaming object: a non-streaming answer is the
  fold of exactly the events a stream would have sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterable, AsyncIterator, Callable, Iterable, Mapping

from ..events import Failed, TokenEvent
from . import template
from .load import ProtocolSpec
from .validate import derive_value


class MachineError(RuntimeError):
    pass


@dataclass(frozen=True)
class WireEvent:
    event: str | None  # the SSE ``event:`` name, where the protocol names events
    data: Any  # a JSON-able payload, or a raw string for a terminal like ``[DONE]``

    def sse(self) -> bytes:
        if self.event:
            return f"event: {self.event}\ndata: {self._payload()}\n\n".encode()
        return f"data: {self._payload()}\n\n".encode()

    def ndjson(self) -> bytes:
        return (self._payload() + "\n").encode()

    def encode(self, framing: str) -> bytes:
        """The bytes on the wire, as the spec's ``stream.framing`` says (``sse`` or ``ndjson``), or ``websocket``:
        the payload alone, one text frame per event (the SSE ``data:`` line's JSON; the event name is in it)."""
        if framing == "websocket":
            return self._payload().encode()
        return self.ndjson() if framing == "ndjson" else self.sse()

    def _payload(self) -> str:
        return self.data if isinstance(self.data, str) else _to_json(self.data)


# one encoder for every event (``json.dumps`` with these options builds a new one at each call)
_to_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


TransitionHook = Callable[["Machine", TokenEvent], None]


class Machine:
    def __init__(self, spec: ProtocolSpec, context: Mapping[str, Any],
                 hooks: Mapping[str, TransitionHook] | None = None, entry: str | None = None, state: Any = None):
        """``state``: the protocol's bookkeeping object (``vars`` in templates; a dataclass with named, typed
        fields where the protocol declares one, else a dict)."""
        if spec.stream is None:
            raise MachineError(f"{spec.source} declares no stream grammar")
        self.spec = spec
        self.table: dict[str, dict] = spec.stream["states"]
        self.events: dict[str, dict] = spec.stream["events"]
        self.state: str = spec.stream["initial"]
        if entry is not None:
            entries = spec.stream.get("entries") or {}
            if entry not in entries:
                raise MachineError(f"{spec.name}: no stream entry named '{entry}' (it has: {', '.join(entries) or 'none'})")
            self.state = entries[entry]
        self.hooks = hooks or {}
        self.vars: Any = state if state is not None else {}
        self.emitted = 0
        self.history: list[WireEvent] = []
        req = context.get("req", {})
        base = {name: derive_value(rule, req) for name, rule in spec.context.items()}
        base["choice"] = 0  # the answer's index among the request's (protocols/choices.py): one answer, 0
        base.update(context)
        self.context = base

    @property
    def done(self) -> bool:
        return not self.table[self.state]

    @property
    def terminal(self) -> WireEvent | None:
        t = self.spec.stream.get("terminal")
        return WireEvent(None, t) if t else None

    def allowed(self) -> list[str]:
        return list(self.table[self.state])

    def feed(self, ev: TokenEvent) -> list[WireEvent]:
        name = type(ev).__name__
        row = self.table[self.state].get(name)
        if row is None:
            raise MachineError(f"{self.spec.name}: state '{self.state}' does not accept {name} "
                               f"(it accepts: {', '.join(self.allowed()) or 'nothing: final'})")
        for hook in row.get("do", []):
            self.hooks[hook](self, ev)
        out = []
        for ev_name in row.get("emit", []):
            wire = self._render(ev_name, ev)
            if wire is not None:
                out.append(wire)
                self.history.append(wire)
        self.state = row.get("next", self.state)
        return out

    def _render(self, ev_name: str, ev: TokenEvent) -> WireEvent | None:
        compiled = self.spec.event_templates[ev_name]
        ctx = {**self.context, "ev": ev, "vars": self.vars, "emitted": self.emitted, "state": self.state}
        if isinstance(ev, Failed):  # an error kind, as this protocol's errors.kinds table words it
            kind = self.spec.error_kind(ev.type)
            ctx["error"] = {"message": ev.message, "type": kind.type, "code": ev.code or kind.code,
                            "status": kind.status}
        if compiled.when is not None and bool(compiled.when(ctx)) == compiled.unless:
            return None
        data = compiled.data(ctx)
        name = compiled.event(ctx) if compiled.event is not None else None
        self.emitted += 1
        return WireEvent(name, data)


def run_all(machine: Machine, events: Iterable[TokenEvent]) -> list[WireEvent]:
    out: list[WireEvent] = []
    for ev in events:
        out.extend(machine.feed(ev))
    return out


async def pump(machine: Machine, events: AsyncIterable[TokenEvent]) -> AsyncIterator[WireEvent]:
    """The trio side: token events in, wire events out, then the terminal (``[DONE]``) if the protocol has one."""
    async for ev in events:
        for wire in machine.feed(ev):
            yield wire
        if machine.done:
            break
    if not machine.done:
        raise MachineError(f"{machine.spec.name}: token stream ended in state '{machine.state}'")
    if machine.terminal is not None:
        yield machine.terminal
