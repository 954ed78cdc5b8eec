"""Responses' ``context_management`` (server-side compaction): once the input passes ``compact_threshold``
tokens, the turns before the newest user turn are summarised by the compaction service into a ``compaction``
item, which comes first in the output; the reply reads the standing prompt, that summary and the newest turn.
Below the threshold nothing changes. Under it, items before the latest compaction item are superseded."""

from __future__ import annotations

import httpx
import pytest

from backends import Recording
from responses_helpers import client, sse_events
from compaction_helpers import INPUT, SUMMARY, payload
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"


async def server(serve, demo_tok, *outputs):
    backend = Recording([ScriptEntry(o) for o in outputs], demo_tok, model_id=MODEL)
    return await serve(backend=backend), backend


@pytest.mark.parametrize("stream", [False, True])
async def test_past_the_threshold_the_older_turns_are_compacted_first(serve, demo_tok, stream):
    s, backend = await server(serve, demo_tok, SUMMARY, "Running them now.")
    body = dict(model=MODEL, input=INPUT, store=False, context_management=[{"type": "compaction", "compact_threshold": 20}])
    if stream:
        events = await sse_events(s, {**body, "stream": True})
        names = [n for n, _ in events]
        assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
        response = events[-1][1]["response"]
        assert names[-1] == "response.completed"
    else:
        response = (await client(s).responses.create(**body)).model_dump()
    compacted, reply = response["output"]
    assert compacted["type"] == "compaction" and payload(compacted)["summary"] == SUMMARY
    assert reply["type"] == "message" and reply["content"][0]["text"] == "Running them now."
    summary_prompt, reply_prompt = backend.prompts
    assert "retrun" in summary_prompt and "Now run the tests." not in summary_prompt  # the older turns only
    assert SUMMARY in reply_prompt and "You are a coding agent." in reply_prompt and "Now run the tests." in reply_prompt
    assert "def main(): retrun 1" not in reply_prompt  # the compacted turns are not read again


async def test_below_the_threshold_nothing_is_compacted(serve, demo_tok):
    s, backend = await server(serve, demo_tok, "Running them now.")
    r = await client(s).responses.create(model=MODEL, input=INPUT, store=False,
                                         context_management=[{"type": "compaction", "compact_threshold": 100000}])
    assert [o.type for o in r.output] == ["message"] and len(backend.prompts) == 1
    assert "def main(): retrun 1" in backend.prompts[0]


async def test_the_latest_compaction_item_supersedes_what_came_before(serve, demo_tok):
    s, backend = await server(serve, demo_tok, SUMMARY, "Tests pass.")
    first = await client(s).responses.create(model=MODEL, input=INPUT, store=False,
                                             context_management=[{"type": "compaction", "compact_threshold": 20}])
    carried = INPUT + [o.model_dump(exclude_none=True) for o in first.output] + [
        {"type": "message", "role": "user", "content": "Did they pass?"}]
    r = await client(s).responses.create(model=MODEL, input=carried, store=False,
                                         context_management=[{"type": "compaction", "compact_threshold": 100000}])
    assert r.output_text == "Tests pass."
    prompt = backend.prompts[-1]
    assert SUMMARY in prompt and "def main(): retrun 1" not in prompt and "Did they pass?" in prompt


@pytest.mark.parametrize("value,param", [([{"type": "clear_everything"}], "context_management"),
                                         ([{"type": "compaction", "compact_threshold": 0}], "context_management"),
                                         ("compaction", "context_management")])
async def test_a_setting_it_cannot_do_is_refused_by_name(serve, value, param):
    s = await serve(["x"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": "hi", "context_management": value})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith(param), r.text


@pytest.mark.parametrize("how", ["chained", "carried", "dropped", "unmanaged"])
async def test_the_turn_after_a_compaction_still_reads_the_turn_it_was_made_for(serve, demo_tok, how):
    """The compaction item summarised the turns before the newest user message, and carries that turn: the next
    turn still reads that message ("Now run the tests."), then the reply to it, as that reply did — chained,
    carried whole by the client, carried from the compaction item on (the API's guide lets a client drop what
    came before it), or without context_management on the next request."""
    s, backend = await server(serve, demo_tok, SUMMARY, "Running them now.", "Yes.")
    c = client(s)
    cm = [{"type": "compaction", "compact_threshold": 20}]
    first = await c.responses.create(model=MODEL, input=INPUT, store=how == "chained", context_management=cm)
    assert [o.type for o in first.output] == ["compaction", "message"]
    later = {"type": "message", "role": "user", "content": "Did they pass?"}
    output = [o.model_dump(exclude_none=True) for o in first.output]
    cm = [{"type": "compaction", "compact_threshold": 100000}]
    if how == "chained":
        await c.responses.create(model=MODEL, input=[later], previous_response_id=first.id, context_management=cm)
    elif how == "carried":
        await c.responses.create(model=MODEL, input=INPUT + output + [later], store=False, context_management=cm)
    elif how == "dropped":
        await c.responses.create(model=MODEL, input=INPUT[:1] + output + [later], store=False, context_management=cm)
    else:
        await c.responses.create(model=MODEL, input=INPUT + output + [later], store=False)
    prompt = backend.prompts[-1]
    assert "def main(): retrun 1" not in prompt  # the summarised turns stay summarised
    order = [prompt.index(t) for t in (SUMMARY, "Now run the tests.", "Running them now.", "Did they pass?")]
    assert order == sorted(order) and prompt.count("Now run the tests.") == 1
