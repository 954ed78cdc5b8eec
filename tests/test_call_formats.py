"""Forced-call and strict-tool arguments keep the date / time / date-time promises structured output keeps
(engine/structured/compile.py's FORMAT_PATTERNS): no 29 February, no year 0000, no hour 24 — in every
grammar that holds a call's arguments, not only in response_format's."""

from __future__ import annotations

import json

import pytest

from tinytitan.chat_request import ChatRequest, Message, Tool
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

SCHEMA = {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
                                           "t": {"type": "string", "format": "time"},
                                           "dt": {"type": "string", "format": "date-time"}},
          "required": ["d", "t", "dt"], "additionalProperties": False}
GOOD = {"d": "2023-02-28", "t": "12:30:00Z", "dt": "2024-12-31T23:59:59+01:00"}
BAD = [{**GOOD, "d": "2023-02-29"}, {**GOOD, "d": "0000-01-01"}, {**GOOD, "d": "2023-13-01"},
       {**GOOD, "t": "24:00:00Z"}, {**GOOD, "dt": "2023-04-31T00:00:00Z"}, {**GOOD, "t": "12:30:00"}]


def accepts(backend, req, text: str) -> bool:
    compiled = backend.prepare(req).grammar
    matcher = compiled.matcher()
    ids = backend.tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


def call(args: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": "f", "arguments": args}) + "\n</tool_call>"


@pytest.mark.parametrize("choice,strict", [("required", False), ("auto", True)])
def test_call_arguments_keep_the_servers_date_and_time_formats(demo_tok, choice, strict):
    backend = ScriptedBackend([ScriptEntry("x")], demo_tok, model_id="m")
    req = ChatRequest("m", (Message("user", "When?"),), (Tool("f", parameters=SCHEMA, strict=strict),),
                      tool_choice=choice, parallel_tool_calls=False)
    assert accepts(backend, req, call(GOOD))
    for args in BAD:
        assert not accepts(backend, req, call(args)), args
