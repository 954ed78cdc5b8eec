"""A Responses stream that an unexpected exception ends once ``response.created`` gave its id (a bug in the
engine or the machine, not a failure the engine reported) sends ``response.failed``; with ``store`` that response
is kept as sent, ``status: "failed"`` with its ``error`` and the output produced so far, so retrieving it answers
what the stream's last event said. A turn chained from it continues from that output, as from a failure the
engine reported (the API documents no refusal for a failed predecessor)."""

from __future__ import annotations

import openai
import pytest
import trio
from openai.types.responses import Response

from responses_helpers import MODEL, client, record_prompts, sse_events
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.protocols import responses_machine

TEXT = " ".join(f"word{i}" for i in range(60))


def break_after(s, monkeypatch, deltas: int) -> None:
    """The Responses machine's ``append`` raises at the ``deltas``-th text delta after the first."""
    proto = s.server.protocols["openai_responses"]
    real, seen = responses_machine.append, []

    def append(m, ev):
        seen.append(ev)
        if len(seen) == deltas:
            raise RuntimeError("a bug in the machine")
        real(m, ev)

    monkeypatch.setattr(proto, "machine_hooks", lambda: {**responses_machine.HOOKS, "append": append})


async def test_a_stream_an_exception_ended_is_kept_failed_and_chains(serve, demo_tok, monkeypatch):
    backend = ScriptedBackend([ScriptEntry(TEXT, delay_ms=20), ScriptEntry("Continued.")], demo_tok)
    s = await serve(backend=backend)
    prompts = record_prompts(s)
    break_after(s, monkeypatch, 3)
    events = await sse_events(s, {"model": MODEL, "input": "tell me", "stream": True})
    assert events[-1][0] == "response.failed"
    sent = events[-1][1]["response"]
    assert sent["status"] == "failed" and "a bug in the machine" in sent["error"]["message"]
    monkeypatch.undo()

    c = client(s)
    got = await c.responses.retrieve(sent["id"])  # (not a 404)
    Response.model_validate(got.model_dump(mode="json", exclude_unset=True), strict=True)
    assert got.model_dump(mode="json", exclude_unset=True) == sent
    assert got.status == "failed" and got.error.code == "server_error"
    [item] = got.output
    text = got.output_text
    assert item.status == "incomplete" and text and TEXT.startswith(text) and text != TEXT

    nxt = await c.responses.create(model=MODEL, input="go on", previous_response_id=sent["id"])
    assert nxt.output_text == "Continued."
    assert [m.content for m in prompts[-1].req.messages] == ["tell me", text, "go on"]


async def test_nothing_is_kept_without_store(serve, monkeypatch):
    s = await serve([{"output": TEXT, "delay_ms": 20}])
    break_after(s, monkeypatch, 3)
    events = await sse_events(s, {"model": MODEL, "input": "x", "stream": True, "store": False})
    assert events[-1][0] == "response.failed"
    with trio.fail_after(20):  # the request's record is made once its handling, a store's write included, is over
        while not [t for t in s.server.observer.recent() if t["path"] == "/v1/responses"]:
            await trio.sleep(0.02)
    with pytest.raises(openai.NotFoundError):
        await client(s).responses.retrieve(events[-1][1]["response"]["id"])
