"""The batching tests' helpers: requests to the demo model, running one or several at once on an engine, what a
client sees of their events, and the demo fixture: the demo model with a logits processor that forces a tool
call or a thought for requests that ask for one, and fails for requests that say 'FAIL'."""

from __future__ import annotations

import dataclasses

import pytest
import trio

from backends import script_forcer
from tinytitan.chat_request import ChatRequest, Grammar, Message
from tinytitan.engine.engine import Engine
from tinytitan.events import Finished, KeepAlive, Started, ToolCallStarted

# a request whose messages say one of these gets a logits processor forcing that output
FORCE = "Call the weather tool."
THINK = "Think first."
SCRIPTS = {FORCE: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
           THINK: "<think>\nThe user wants a short answer, so keep it short.\n</think>\n\nShort."}
RECORDS = Grammar("json_schema", {"type": "array", "minItems": 3, "items": {
    "type": "object", "additionalProperties": False, "required": ["name", "count"],
    "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"}}}},
    where="response_format")


def req(text: str, **kw) -> ChatRequest:
    kw.setdefault("reasoning", False)
    kw.setdefault("temperature", 0)
    return ChatRequest(model="tinytitan-demo", messages=(Message("user", text),), **kw)


def summary(events) -> list:
    """What a client sees, less the parts that differ between runs by design (call ids, keep-alives)."""
    out = []
    for ev in events:
        if isinstance(ev, KeepAlive):
            continue
        if isinstance(ev, ToolCallStarted):
            ev = dataclasses.replace(ev, call_id="")
        if isinstance(ev, Finished):  # how much of the prompt was cached depends on what ran before; times vary
            ev = dataclasses.replace(ev, usage=dataclasses.replace(ev.usage, cached_tokens=0), timing=None)
        if isinstance(ev, Started):
            ev = Started(ev.prompt_tokens)
        out.append(ev)
    return _merged(out)


def _merged(events) -> list:
    """Deltas arrive merged differently depending on timing: compare their text per channel run."""
    out = []
    for ev in events:
        if out and type(ev) is type(out[-1]) and hasattr(ev, "text") and getattr(ev, "index", None) == getattr(
                out[-1], "index", None):
            out[-1] = dataclasses.replace(out[-1], text=out[-1].text + ev.text)
        else:
            out.append(ev)
    return out


async def run(engine: Engine, r: ChatRequest, stop_after: int | None = None) -> list:
    events = []
    async with engine.session(r) as session:
        async for ev in session:
            events.append(ev)
            if stop_after is not None and len(events) >= stop_after:
                break
    return events


@pytest.fixture
def demo(demo_backend, monkeypatch):
    """The demo model, with a per-request logits processor (the hook structured output uses) that forces a
    tool call or a thought for requests that ask for one, and fails for requests that say 'FAIL'."""
    real = demo_backend.logits_processors
    end = min(demo_backend.tokenizer.eos_token_ids)

    def forcing(text):
        return script_forcer(demo_backend.tokenizer.encode(text, add_special_tokens=False), end)

    def failing(tokens, logits):
        if tokens.size > 3 + failing.prompt:
            raise RuntimeError("this member's processor broke")
        return logits

    def processors(prepared, loop):
        said = " ".join(m.content for m in prepared.req.messages)
        for trigger, text in SCRIPTS.items():
            if trigger in said:
                return real(prepared, loop) + [forcing(text)]
        if "FAIL" in said:
            failing.prompt = len(prepared.tokens)
            return real(prepared, loop) + [failing]
        return real(prepared, loop)

    monkeypatch.setattr(demo_backend, "logits_processors", processors)
    demo_backend.prompt_cache.clear()
    return demo_backend


async def together(engine: Engine, requests: dict) -> dict:
    """The requests (by key) sent at once: each one's events, by the same key."""
    got: dict = {}
    async with trio.open_nursery() as n:
        for key, r in requests.items():
            async def one(key=key, r=r):
                got[key] = await run(engine, r)
            n.start_soon(one)
    return got


async def alone_and_together(engine: Engine, requests: list[ChatRequest]) -> tuple[list, list]:
    alone = [summary(await run(engine, r)) for r in requests]
    got = await together(engine, dict(enumerate(requests)))
    return alone, [summary(got[i]) for i in range(len(requests))]
