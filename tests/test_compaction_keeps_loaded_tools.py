"""A compaction keeps the tools a client-executed tool search loaded (Codex's ``tool_search``): the item carries
the search pairs it summarised, and the turns after it still declare and call those tools. A summary names
tools; it does not declare them."""

from __future__ import annotations

import json

import pytest

from responses_helpers import client
from compaction_helpers import ECHO_CALL, MODEL, NEXT, SEARCHED, TOOLS, payload, server
from tinytitan.protocols import compaction

SUMMARY = "The user wants m-42 echoed; the echo tool was found."


def declared(prompt: str) -> bool:
    return '"name": "mcp__demo__echo"' in prompt


@pytest.mark.parametrize("how", ["compact", "trigger"])
async def test_a_compacted_conversation_still_declares_what_a_search_loaded(serve, demo_tok, how):
    s, backend = await server(serve, demo_tok, SUMMARY, ECHO_CALL)
    c = client(s)
    if how == "compact":
        output = (await c.responses.compact(model=MODEL, input=SEARCHED)).model_dump()["output"]
    else:
        r = await c.responses.create(model=MODEL, input=SEARCHED + [{"type": "compaction_trigger"}], tools=TOOLS,
                                     store=False)
        output = r.model_dump()["output"]
    (item,) = [i for i in output if i["type"] == "compaction"]
    carried = payload(item)["loaded"]
    assert [i["type"] for i in carried] == ["tool_search_call", "tool_search_output"]
    # the client replaces the history with the compaction's output (Codex does), then goes on
    after = [{k: v for k, v in i.items() if k != "id"} for i in output] + [NEXT]
    r = await c.responses.create(model=MODEL, input=after, tools=TOOLS, store=False)
    (call,) = r.output
    assert call.type == "function_call" and call.name == "mcp__demo__echo", r.output
    assert json.loads(call.arguments) == {"text": "m-42"}
    assert declared(backend.prompts[-1]) and SUMMARY in backend.prompts[-1]


async def test_server_side_compaction_keeps_what_a_search_loaded(serve, demo_tok):
    s, backend = await server(serve, demo_tok, SUMMARY, "Echoing.", ECHO_CALL)
    c = client(s)
    managed = [{"type": "compaction", "compact_threshold": 20}]
    r = await c.responses.create(model=MODEL, input=SEARCHED + [NEXT], tools=TOOLS, store=False,
                                 context_management=managed)
    item, reply = r.model_dump()["output"]
    assert item["type"] == "compaction" and [i["type"] for i in payload(item)["loaded"]] == \
        ["tool_search_call", "tool_search_output"]
    assert declared(backend.prompts[-1])  # the reply read after the summary still declares it
    # the API's guide lets the client drop what came before the item
    later = [{k: v for k, v in item.items() if k != "id"}, {"type": "message", "role": "assistant",
                                                             "content": "Echoing."}, NEXT]
    r = await c.responses.create(model=MODEL, input=later, tools=TOOLS, store=False, context_management=managed)
    assert r.output[-1].type == "function_call" and r.output[-1].name == "mcp__demo__echo"


def test_pairs_the_input_still_holds_are_not_read_twice():
    item = {"type": "compaction", "encrypted_content": compaction.encode("s", "model", MODEL,
                                                                         loaded=compaction.searches(SEARCHED))}
    kept_all = SEARCHED + [item, NEXT]  # a client that kept the items the summary covers
    assert compaction.superseded(kept_all, managed=False) == kept_all
    dropped = [item, NEXT]
    read = compaction.superseded(dropped, managed=False)
    assert [i["type"] for i in read] == ["compaction", "tool_search_call", "tool_search_output", "message"]


def test_a_second_compaction_carries_what_the_first_carried():
    first = {"type": "compaction", "encrypted_content": compaction.encode("s", "model", MODEL,
                                                                          loaded=compaction.searches(SEARCHED))}
    again = compaction.searches([first, NEXT])
    assert [i["call_id"] for i in again] == ["ts_1", "ts_1"]


def test_the_transcript_says_what_was_searched_and_loaded():
    text = compaction.transcript(SEARCHED)
    assert 'Assistant searched the tools: {"query": "echo"} [call ts_1]' in text
    assert "Tools loaded [call ts_1]: mcp__demo__echo" in text
