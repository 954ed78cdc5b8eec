"""A Responses stream cut short while its older turns are summarised (``context_management`` past its threshold,
or a ``compaction_trigger`` turn: the client hangs up, the server stops) once ``response.created`` gave its id is
kept as any cut stream is: ``incomplete``, its output what was finished. A summary cut mid-way is not in it (a
partial summary would stand for the whole conversation before it); one that was finished is. Chaining from the
response then reads the conversation as it was."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response

from responses_helpers import MODEL, client, hang_up, record_prompts, stored
from compaction_helpers import HISTORY, payload
from responses_states import machine_at
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.events import Failed, TextDelta
from tinytitan.protocols.openai_responses import OpenAIResponses

SUMMARY = " ".join(f"Fact {i}: the file src/app.py line {i} was read." for i in range(60))
INPUT = [{"type": "message", "role": "developer", "content": "You are a coding agent."}, *HISTORY,
         {"type": "message", "role": "user", "content": "Now run the tests."}]
MANAGED = {"context_management": [{"type": "compaction", "compact_threshold": 20}]}
TRIGGER = {"input": [*HISTORY, {"type": "compaction_trigger"}]}


@pytest.mark.parametrize("how", [MANAGED, TRIGGER], ids=["context_management", "compaction_trigger"])
async def test_a_stream_cut_mid_summary_is_kept_incomplete_without_the_summary(serve, demo_tok, how):
    backend = ScriptedBackend([ScriptEntry(SUMMARY, delay_ms=20), ScriptEntry("Continued.")], demo_tok)
    s = await serve(backend=backend)
    prompts = record_prompts(s)
    body = {"model": MODEL, "input": INPUT, "stream": True, **how}
    rid = await hang_up(s, body, "response.output_item.added", 1)  # the compaction item announced, not done
    got = await stored(s, rid)
    Response.model_validate(got, strict=True)
    assert got["id"] == rid and got["status"] == "incomplete" and got["incomplete_details"] == {"reason": None}
    assert got["output"] == []  # (a summary cut mid-way would stand for all before it)

    # (its text: whichever script entry the cut pass left unread; a summary left unread is read without the delay
    # that let the hang-up land mid-summary, where it took 20 ms a token for 900 tokens)
    backend.entries[0] = ScriptEntry(SUMMARY)
    nxt = await client(s).responses.create(model=MODEL, input="go on", previous_response_id=rid)
    assert nxt.status == "completed"
    read = prompts[-1].req.messages
    assert read[-1].content == "go on" and any("retrun" in str(m.content) for m in read)  # the turns, not summarised


def test_a_summary_finished_before_the_cut_is_kept_in_the_output():
    """Cut between the summary and the reply's first event (the reply's prompt still being read): the compaction
    item is finished, and kept."""
    proto = OpenAIResponses()
    m = machine_at(proto, "precompacting")
    m.feed(TextDelta("the summary"))
    proto.abandon(m)
    last = m.history[-1].data
    assert m.done and last["type"] == "response.incomplete"
    [item] = last["response"]["output"]
    assert item["type"] == "compaction" and payload(item)["summary"] == "the summary"
    Response.model_validate(json.loads(json.dumps(last["response"])), strict=True)


@pytest.mark.parametrize("ending", ["abandoned", "failed"])
def test_a_summary_not_finished_is_no_output_item(ending):
    """Cut or failed mid-summary: the compaction item announced is never done, so no response holds an empty
    summary that a turn chained from it would read in place of the conversation."""
    proto = OpenAIResponses()
    m = machine_at(proto, "precompacting")
    del m.context["compaction"]["mode"]  # (set once the summary pass finished)
    if ending == "abandoned":
        proto.abandon(m)
    else:
        m.feed(Failed("broken"))
    last = m.history[-1].data
    assert m.done and last["type"] == f"response.{'incomplete' if ending == 'abandoned' else 'failed'}"
    assert last["response"]["output"] == []
    assert [w.data["type"] for w in m.history].count("response.output_item.done") == 0


async def test_a_compaction_turn_cut_mid_summary_counts_what_its_pass_spent(serve, demo_tok):
    """A ``compaction_trigger`` turn's usage is its summary passes' (as its Finished says): cut mid-pass, the stored
    response counts the pass's prompt and the tokens it decoded so far, where it said 0 output tokens."""
    import httpx
    import trio

    from responses_helpers import stored

    backend = ScriptedBackend([ScriptEntry(SUMMARY, delay_ms=20)], demo_tok)
    s = await serve(backend=backend)
    prompts = record_prompts(s)
    rid = None
    async with httpx.AsyncClient(timeout=30) as h:
        async with h.stream("POST", s.url("/v1/responses"), json={"model": MODEL, "stream": True, **TRIGGER}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                    rid = rid or data["response"]["id"]
                    if data["type"] == "response.output_item.added":
                        await trio.sleep(1.0)  # (the pass decodes a token each 20 ms meanwhile)
                        break
    got = await stored(s, rid)
    Response.model_validate(got, strict=True)
    assert got["status"] == "incomplete"
    [summary_pass] = prompts
    usage = got["usage"]
    assert usage["input_tokens"] == len(summary_pass.tokens)
    assert 0 < usage["output_tokens"] < len(demo_tok.encode(SUMMARY))  # what it decoded before the cut
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
