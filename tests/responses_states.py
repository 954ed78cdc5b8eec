"""The Responses stream grammar's table for tests: a sample of every engine event (SAMPLES), a way into every
state of the stream machine (PATHS: its entry and the events that lead there), and machine_at, a machine
driven into a state."""

from __future__ import annotations

import json

from tinytitan.events import (Failed, Finished, KeepAlive, PromptLogprobs, ReasoningDelta, Started, TextDelta,
                              TokenLogprob, ToolCallArgsDelta, ToolCallDone, ToolCallStarted, Usage)
from tinytitan.speclang.machine import run_all

from responses_helpers import MODEL


TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
SAMPLES = {
    "Started": Started(5), "ReasoningDelta": ReasoningDelta("r"), "TextDelta": TextDelta("t"),
    "ToolCallStarted": ToolCallStarted(0, "call_1", "get_weather"), "ToolCallArgsDelta": ToolCallArgsDelta(0, "{}"),
    "ToolCallDone": ToolCallDone(0, "{}"), "KeepAlive": KeepAlive(1.0), "Finished": Finished("stop", Usage(5, 0, 3, 1)),
    "Failed": Failed("broken"), "PromptLogprobs": PromptLogprobs("p", (TokenLogprob("p", (112,), None),)),
}
# a way into every state: (entry, the events that lead there)
PATHS = {
    "start": (None, []), "idle": (None, ["Started"]), "reasoning": (None, ["Started", "ReasoningDelta"]),
    "text": (None, ["Started", "TextDelta"]), "call": (None, ["Started", "ToolCallStarted"]),
    "end": (None, ["Started", "Finished"]), "compact_start": ("compaction", []),
    "compacting": ("compaction", ["Started"]),
    "precompact_start": ("compacted", []), "precompacting": ("compacted", ["Started"]),
}


def machine_at(proto, state):
    entry, path = PATHS[state]
    v = proto.validate(json.dumps({"model": MODEL, "input": "x", "tools": TOOLS}).encode())
    m = proto.machine(v, MODEL, True, entry)
    m.context["compaction"] = {"mode": "model"}
    run_all(m, [SAMPLES[name] for name in path])
    assert m.state == state
    return m
