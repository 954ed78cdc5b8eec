"""The Responses event grammar, event by event: order, sequence numbers, indices and ids, the final object as
a projection of the events; and the table itself: every (state, TokenEvent) pair has a row or raises."""

from __future__ import annotations

import json

import pytest

from tinytitan.events import EVENT_TYPES, Finished, Started, TextDelta, Usage
from tinytitan.protocols.openai_responses import OpenAIResponses
from tinytitan.speclang import SpecError
from tinytitan.speclang.load import compile_spec
from tinytitan.speclang.machine import Machine, MachineError, run_all

from responses_helpers import MODEL, sse_events
from responses_states import PATHS, SAMPLES, TOOLS, machine_at


def check_common(events):
    """Sequence numbers from 0 without gaps; the SSE event name is the payload's type; no [DONE]."""
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert all(name == d["type"] for name, d in events)
    assert events[0][0] == "response.created" and events[1][0] == "response.in_progress"
    for _, d in events[:2]:
        r = d["response"]
        assert r["status"] == "in_progress" and r["model"] == MODEL and r["created_at"] and r["output"] == []
    final = events[-1][1]["response"]
    assert all(d["response"]["id"] == final["id"] for _, d in events if "response" in d)
    done = [d["item"] for _, d in events if d["type"] == "response.output_item.done"]
    assert final["output"] == done  # the object's output is the projection of the item events
    return final


async def test_reasoning_text_tool_grammar(serve):
    raw = ('<think>Plan it.</think>Checking the weather.'
           '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    s = await serve([raw])
    events = await sse_events(s, {"model": MODEL, "input": "weather?", "tools": TOOLS, "stream": True})
    final = check_common(events)
    kinds = [n for n, _ in events]

    def squash(names):  # runs of the same delta event as one
        out = []
        for n in names:
            if not (out and out[-1] == n and n.endswith(".delta")):
                out.append(n)
        return out

    assert squash(kinds) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]
    # every event of an item names that item's id and output_index; done text = the deltas joined
    by_index: dict[int, list[dict]] = {}
    for _, d in events:
        if "output_index" in d:
            by_index.setdefault(d["output_index"], []).append(d)
    assert sorted(by_index) == [0, 1, 2]
    for index, evs in by_index.items():
        item_id = evs[0]["item"]["id"]
        assert all(e.get("item_id", e.get("item", {}).get("id")) == item_id for e in evs)
        deltas = "".join(e["delta"] for e in evs if e["type"].endswith(".delta"))
        finished = evs[-1]["item"]
        text = {"reasoning": lambda i: i["content"][0]["text"], "message": lambda i: i["content"][0]["text"],
                "function_call": lambda i: i["arguments"]}[finished["type"]](finished)
        assert deltas == text and finished["status"] == "completed"
    assert final["output"][0]["id"].startswith("rs_") and final["output"][1]["id"].startswith("msg_")
    assert final["output"][2]["id"].startswith("fc_") and json.loads(final["output"][2]["arguments"]) == {"city": "Paris"}
    assert final["status"] == "completed" and final["usage"]["output_tokens"] > 0


async def test_text_after_tool_and_two_calls(serve):
    raw = ('<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>'
           '<tool_call>{"name": "get_weather", "arguments": {"city": "B"}}</tool_call>')
    s = await serve([raw, "Before.<think>mid</think>After."])
    events = await sse_events(s, {"model": MODEL, "input": "x", "tools": TOOLS, "stream": True})
    final = check_common(events)
    assert [o["type"] for o in final["output"]] == ["function_call", "function_call"]
    assert final["output"][0]["call_id"] != final["output"][1]["call_id"]
    events = await sse_events(s, {"model": MODEL, "input": "x", "stream": True})
    final = check_common(events)
    assert [o["type"] for o in final["output"]] == ["message", "reasoning", "message"]
    assert [o["content"][0]["text"] for o in final["output"]] == ["Before.", "mid", "After."]


async def test_incomplete_grammar(serve):
    s = await serve(["A long answer that the cap will cut short, for certain."])
    events = await sse_events(s, {"model": MODEL, "input": "x", "stream": True, "max_output_tokens": 4})
    final = check_common(events)
    assert events[-1][0] == "response.incomplete"
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [n for n, _ in events[-4:-1]] == ["response.output_text.done", "response.content_part.done",
                                           "response.output_item.done"]
    assert events[-2][1]["item"]["status"] == "incomplete"


async def test_failed_before_anything(serve):
    s = await serve([{"output": "", "error": "no luck"}])
    events = await sse_events(s, {"model": MODEL, "input": "x", "stream": True})
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.failed"]
    check_common(events)


# -- the table (its samples and paths: responses_states.py) --------------------------------------------------
@pytest.fixture(scope="module")
def proto():
    return OpenAIResponses()


def test_every_state_is_reachable(proto):
    assert set(PATHS) == set(proto.spec.stream["states"])
    assert set(SAMPLES) == set(EVENT_TYPES)


@pytest.mark.parametrize("state", sorted(PATHS))
@pytest.mark.parametrize("event", sorted(SAMPLES))
def test_every_pair_has_a_row_or_raises(proto, state, event):
    m = machine_at(proto, state)
    row = proto.spec.stream["states"][state].get(event)
    if row is None:
        with pytest.raises(MachineError, match=f"state '{state}' does not accept {event}"):
            m.feed(SAMPLES[event])
        return
    wire = m.feed(SAMPLES[event])
    assert m.state == row.get("next", state)
    names = [w.data["type"] for w in wire]
    assert all(w.event == w.data["type"] for w in wire)
    assert len(names) <= len(row.get("emit", []))
    seqs = [w.data["sequence_number"] for w in m.history]
    assert seqs == list(range(len(seqs)))


def test_compacted_entry_puts_the_compaction_item_before_the_reply(proto):
    m = machine_at(proto, "precompact_start")
    wire = run_all(m, [Started(9), TextDelta("the summary"), Started(5), TextDelta("Hi."),
                       Finished("stop", Usage(5, 0, 2, 0))])
    out = wire[-1].data["response"]["output"]
    assert [o["type"] for o in out] == ["compaction", "message"] and out[0]["encrypted_content"]
    assert wire[-1].data["type"] == "response.completed"


def test_compaction_entry_emits_one_compaction_item(proto):
    m = machine_at(proto, "compact_start")
    wire = run_all(m, [Started(9), TextDelta("the summary"), Finished("stop", Usage(9, 0, 2, 0))])
    names = [w.data["type"] for w in wire]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.output_item.done", "response.completed"]
    out = wire[-1].data["response"]["output"]
    assert len(out) == 1 and out[0]["type"] == "compaction" and out[0]["encrypted_content"]
    assert out[0]["id"] == wire[2].data["item"]["id"]


# -- the spec-language features this protocol uses ----------------------------------------------------------
def _tiny(entries):
    return {"protocol": "t", "errors": {"envelope": {}, "kinds": {"server_error": {"status": 500, "type": "e"}}},
            "stream": {"initial": "a", "entries": entries, "computed": ["history_len"],
                       "states": {"a": {"Started": {"emit": ["x", "y"], "next": "b"}}, "b": {}},
                       "events": {"x": {"data": {"n": "$emitted"}},
                                  "y": {"data": {"seen": "${history_len}"}}}}}


def test_entries_are_checked_at_load_and_at_start():
    with pytest.raises(SpecError, match="stream.entries.other: no state named 'zzz'"):
        compile_spec(_tiny({"other": "zzz"}), "t.yaml")
    spec = compile_spec(_tiny({"other": "b"}), "t.yaml")
    assert Machine(spec, {}, entry="other").state == "b"
    with pytest.raises(MachineError, match="no stream entry named 'nope'"):
        Machine(spec, {}, entry="nope")


def test_history_grows_as_each_event_renders():
    spec = compile_spec(_tiny({}), "t.yaml")
    m = Machine(spec, {})
    m.context["history_len"] = lambda: len(m.history)
    wire = m.feed(Started(1))
    assert [w.data for w in wire] == [{"n": 0}, {"seen": "1"}]
