"""Anthropic context editing's test helpers: a conversation of tool uses each answered by a long result, and one
Messages request with context_management edits (streamed or not, its reply validated strictly) → what the
server said it cleared, and the prompt the model read."""

from __future__ import annotations

import anthropic_util
import strict


def tool_result_conversation(n: int, names=("Read",)) -> list[dict]:
    """A user turn, then ``n`` tool uses each answered by a long result, then a user question."""
    out = [{"role": "user", "content": "Look at the files."}]
    for i in range(n):
        name = names[i % len(names)]
        out += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"tu{i}", "name": name,
                                                   "input": {"path": f"file{i}.txt"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu{i}",
                                              "content": f"RESULT-{i} " + "lorem ipsum " * 40}]}]
    return out + [{"role": "user", "content": "Summarise."}]


TOOLS = [{"name": n, "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
         for n in ("Read", "Grep")]


async def ask_with_edits(s, stream: bool, edits, messages, prompts):
    body = anthropic_util.body(messages=messages, tools=TOOLS, stream=stream or None,
                               context_management={"edits": edits} if edits is not None else None)
    resp = await anthropic_util.post(s, body, headers={"anthropic-beta": "context-management-2025-06-27"})
    assert resp.status_code == 200, resp.text
    if stream:
        events = [data for _, data in anthropic_util.sse(resp.text)]
        for data in events:
            strict.message_event(data)
        (delta,) = [e for e in events if e["type"] == "message_delta"]
        return delta.get("context_management"), prompts[-1].prompt_text
    data = resp.json()
    strict.message(data)
    return data.get("context_management"), prompts[-1].prompt_text
