"""A second server-side compaction carries each search pair once (the pairs the first one carried are read
after it, then summarised again: counted twice, they would double with every compaction)."""

from __future__ import annotations

from compaction_helpers import MODEL, NEXT, SEARCHED, payload, server, ECHO_CALL, TOOLS
from responses_helpers import client
from tinytitan.protocols import compaction


def test_a_second_server_side_compaction_carries_each_pair_once():
    first = {"type": "compaction", "encrypted_content": compaction.encode("s", "model", MODEL,
                                                                          loaded=compaction.searches(SEARCHED))}
    more = [{"type": "message", "role": "assistant", "content": "Echoing."}, NEXT,
            {"type": "message", "role": "assistant", "content": "Done."},
            {"type": "message", "role": "user", "content": "and again"}]
    items = compaction.superseded([first] + more, managed=True)  # what generate reads
    standing, older, newest = compaction.split_for_compaction(items)
    again = compaction.searches(older)
    assert [i["call_id"] for i in again] == ["ts_1", "ts_1"], again


async def test_server_side_compaction_twice_over_http(serve, demo_tok):
    s, backend = await server(serve, demo_tok, "S1", "Echoing.", "S2", "Done.")
    c = client(s)
    managed = [{"type": "compaction", "compact_threshold": 20}]
    r = await c.responses.create(model=MODEL, input=SEARCHED + [NEXT], tools=TOOLS, store=False,
                                 context_management=managed)
    item, reply = r.model_dump()["output"]
    later = [{k: v for k, v in item.items() if k != "id"}, {"type": "message", "role": "assistant",
                                                             "content": "Echoing."}, NEXT,
             {"type": "message", "role": "user", "content": "and again"}]
    r = await c.responses.create(model=MODEL, input=later, tools=TOOLS, store=False, context_management=managed)
    item2 = r.model_dump()["output"][0]
    assert item2["type"] == "compaction"
    assert [i["type"] for i in payload(item2)["loaded"]] == ["tool_search_call", "tool_search_output"]
