"""What an answer says, read from each protocol's body or stream into one shape (``Told``), checking the
stream's grammar on the way: the output fuzz's readers (tests/test_fuzz_outputs.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from jiter import from_json  # what the anthropic SDK reads input_json_delta with

from sse import parse_sse
from tinytitan.protocols.common import RUN_BREAK


@dataclass
class Told:
    """``items``: ("reasoning" | "text", str) or ("call", name, arguments, complete or None when the wire does
    not say); ``finish``: the protocol's own word; ``output_tokens``; ``reasoning_tokens`` where reported."""

    items: list = field(default_factory=list)
    finish: object = None
    stop_sequence: object = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None

    def texts(self, kind: str) -> str:
        return "".join(i[1] for i in self.items if i[0] == kind)

    def one_string(self) -> str:
        """The text runs as Chat and Ollama give them, one string: a run after a call that followed earlier
        text is led by a paragraph break (protocols.common.TextRuns)."""
        out, called = "", False
        for i in self.items:
            if i[0] == "text":
                out += (RUN_BREAK if out and called else "") + i[1]
                called = False
            elif i[0] == "call":
                called = True
        return out

    def calls(self) -> list:
        return [i for i in self.items if i[0] == "call"]


class Bad(AssertionError):
    pass


def check(cond, what: str) -> None:
    if not cond:
        raise Bad(what)


# Chat Completions ------------------------------------------------------------------------------------------
def chat_nonstream(d: dict) -> Told:
    check(d.get("object") == "chat.completion", f"chat: object {d.get('object')!r}")
    check(len(d["choices"]) == 1, "chat: one choice")
    msg = d["choices"][0]["message"]
    t = Told(finish=d["choices"][0]["finish_reason"], output_tokens=d["usage"]["completion_tokens"],
             reasoning_tokens=d["usage"]["completion_tokens_details"]["reasoning_tokens"])
    if msg.get("reasoning_content"):
        t.items.append(("reasoning", msg["reasoning_content"]))
    if msg.get("content"):
        t.items.append(("text", msg["content"]))
    check(msg.get("content") is not None or msg.get("tool_calls"), "chat: content null without tool calls")
    for c in msg.get("tool_calls") or []:
        check(c["type"] == "function" and c["id"], f"chat: call shape {c}")
        t.items.append(("call", c["function"]["name"], c["function"]["arguments"], None))
    return t


def chat_stream(text: str) -> Told:
    events = parse_sse(text)
    check(events and events[-1][1] == "[DONE]", "chat stream: does not end with data: [DONE]")
    chunks = [d for _, d in events[:-1]]
    check(all(isinstance(c, dict) for c in chunks), "chat stream: a non-JSON chunk before [DONE]")
    check(chunks, "chat stream: no chunks")
    check(all("error" not in c for c in chunks), f"chat stream: an error chunk {chunks}")
    ids = {c["id"] for c in chunks}
    check(len(ids) == 1, f"chat stream: chunk ids differ {ids}")
    check(all(c["object"] == "chat.completion.chunk" for c in chunks), "chat stream: chunk object")
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "chat stream: first delta has no role")
    reasoning, content = [], []
    calls: dict[int, dict] = {}
    order: list[int] = []
    finish, usage = None, None
    for c in chunks:
        if c.get("usage"):
            check(c["choices"] == [] and usage is None, "chat stream: usage chunk shape / twice")
            usage = c["usage"]
            continue
        check(finish is None, f"chat stream: a chunk after finish_reason: {c}")
        check(len(c["choices"]) == 1, "chat stream: one choice per chunk")
        ch = c["choices"][0]
        delta = ch["delta"]
        if delta.get("reasoning_content"):
            reasoning.append(delta["reasoning_content"])
        if delta.get("content"):
            content.append(delta["content"])
        for tc in delta.get("tool_calls") or []:
            i = tc["index"]
            if i not in calls:
                check(i == len(order), f"chat stream: tool call index {i} opened after {order}")
                check(tc.get("id") and tc["function"].get("name") is not None, f"chat stream: first delta {tc}")
                calls[i] = {"name": tc["function"]["name"], "args": tc["function"].get("arguments") or ""}
                order.append(i)
            else:
                check(i == order[-1], f"chat stream: arguments for call {i} while {order[-1]} is open")
                check("id" not in tc and "name" not in tc.get("function", {}), f"chat stream: id/name again {tc}")
                calls[i]["args"] += tc["function"].get("arguments") or ""
        if ch.get("finish_reason"):
            finish = ch["finish_reason"]
    check(finish is not None, "chat stream: no finish_reason")
    check(usage is not None, "chat stream: no usage chunk (include_usage)")
    t = Told(finish=finish, output_tokens=usage["completion_tokens"],
             reasoning_tokens=usage["completion_tokens_details"]["reasoning_tokens"])
    if reasoning:
        t.items.append(("reasoning", "".join(reasoning)))
    if content:
        t.items.append(("text", "".join(content)))
    for i in order:
        t.items.append(("call", calls[i]["name"], calls[i]["args"], None))
    return t


# Responses ------------------------------------------------------------------------------------------------
def responses_items(resp: dict) -> Told:
    check(resp["status"] in ("completed", "incomplete"), f"responses: status {resp['status']}")
    if resp["status"] == "incomplete":
        check(resp["incomplete_details"] == {"reason": "max_output_tokens"}, f"responses: {resp['incomplete_details']}")
    t = Told(finish=resp["status"], output_tokens=resp["usage"]["output_tokens"],
             reasoning_tokens=resp["usage"]["output_tokens_details"]["reasoning_tokens"])
    for item in resp["output"]:
        if item["type"] == "reasoning":
            check(len(item["content"]) == 1, "responses: reasoning content parts")
            t.items.append(("reasoning", item["content"][0]["text"]))
        elif item["type"] == "message":
            check(len(item["content"]) == 1, "responses: message content parts")
            t.items.append(("text", item["content"][0]["text"]))
        elif item["type"] == "function_call":
            check(item["status"] in ("completed", "incomplete"), f"responses: call status {item['status']}")
            t.items.append(("call", item["name"], item["arguments"], item["status"] == "completed"))
        else:
            raise Bad(f"responses: unexpected output item {item['type']}")
    return t


def responses_stream(text: str) -> tuple[Told, dict]:
    events = parse_sse(text)
    check(events, "responses stream: empty")
    check(all(isinstance(d, dict) for _, d in events), "responses stream: a non-JSON event (or [DONE])")
    for k, (name, d) in enumerate(events):
        check(d.get("type") == name, f"responses stream: event name {name} vs type {d.get('type')}")
        check(d.get("sequence_number") == k, f"responses stream: sequence_number {d.get('sequence_number')} at {k}")
    names = [n for n, _ in events]
    check(names[:2] == ["response.created", "response.in_progress"], f"responses stream: starts {names[:2]}")
    check(names[-1] in ("response.completed", "response.incomplete"), f"responses stream: ends {names[-1]}")
    check(sum(n in ("response.completed", "response.incomplete", "response.failed") for n in names) == 1,
          "responses stream: more than one terminal event")
    items: list[dict] = []  # as the deltas built them
    done_items: list[dict] = []
    open_item = None
    for name, d in events[2:-1]:
        if name == "response.output_item.added":
            check(open_item is None, "responses stream: an item added while another is open")
            check(d["output_index"] == len(items), f"responses stream: output_index {d['output_index']}")
            open_item = dict(d["item"], _text="", _parts=0, _part_done=False)
            items.append(open_item)
            continue
        check(open_item is not None, f"responses stream: {name} outside an item")
        check(d.get("output_index") == open_item_index(items, open_item), f"responses stream: {name} index")
        if "item_id" in d:
            check(d["item_id"] == open_item["id"], f"responses stream: {name} item_id")
        kind = open_item["type"]
        if name == "response.content_part.added":
            check(kind in ("message", "reasoning") and open_item["_parts"] == 0, "responses stream: part added")
            open_item["_parts"] += 1
        elif name in ("response.output_text.delta", "response.reasoning_text.delta"):
            want = "message" if name == "response.output_text.delta" else "reasoning"
            check(kind == want and open_item["_parts"] == 1 and not open_item["_part_done"],
                  f"responses stream: {name} in a {kind}")
            open_item["_text"] += d["delta"]
        elif name == "response.function_call_arguments.delta":
            check(kind == "function_call", f"responses stream: args delta in a {kind}")
            open_item["_text"] += d["delta"]
        elif name in ("response.output_text.done", "response.reasoning_text.done"):
            check(d["text"] == open_item["_text"], f"responses stream: {name} text {d['text']!r} vs deltas "
                                                   f"{open_item['_text']!r}")
        elif name == "response.content_part.done":
            check(d["part"]["text"] == open_item["_text"], "responses stream: part done text vs deltas")
            open_item["_part_done"] = True
        elif name == "response.function_call_arguments.done":
            check(d["arguments"] == open_item["_text"],
                  f"responses stream: arguments.done {d['arguments']!r} vs deltas {open_item['_text']!r}")
            check(d["name"] == open_item["name"], "responses stream: arguments.done name")
        elif name == "response.output_item.done":
            it = d["item"]
            check(it["id"] == open_item["id"] and it["type"] == kind, "responses stream: item done id/type")
            if kind == "function_call":
                check(it["arguments"] == open_item["_text"], "responses stream: item done arguments vs deltas")
                check(it["name"] == open_item["name"] and it["call_id"] == open_item["call_id"],
                      "responses stream: item done name / call_id")
            else:
                check(open_item["_part_done"], "responses stream: item done before its part")
                check(it["content"][0]["text"] == open_item["_text"], "responses stream: item done text vs deltas")
            done_items.append(it)
            open_item = None
        else:
            raise Bad(f"responses stream: unexpected event {name}")
    check(open_item is None, "responses stream: an item never closed")
    final = events[-1][1]["response"]
    check(final["output"] == done_items, "responses stream: final output is not the items' done events")
    return responses_items(final), final


def open_item_index(items: list, item: dict) -> int:
    return next(i for i, x in enumerate(items) if x is item)


# Messages -------------------------------------------------------------------------------------------------
def tool_input(text: str):
    """What the fold makes of a call's streamed arguments (and what a client would): a JSON object, else {}."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return None  # not JSON at all: the stream and the fold disagree about what this is
    return value if isinstance(value, dict) else {}


def sdk_input(partial_json: str | None, start_input: dict):
    """A tool_use block's ``input`` as the anthropic SDK accumulates a stream: jiter in partial mode over the
    concatenated ``partial_json`` (it raises on text that is not a JSON prefix; so does this)."""
    if partial_json is None:
        return start_input
    try:
        return from_json(partial_json.encode(), partial_mode=True)
    except ValueError as exc:
        raise Bad(f"messages stream: the SDK cannot read the tool_use input {partial_json!r}: {exc}") from None


def messages_nonstream(d: dict) -> Told:
    check(d.get("type") == "message" and d.get("role") == "assistant", "messages: shape")
    t = Told(finish=d["stop_reason"], stop_sequence=d["stop_sequence"], output_tokens=d["usage"]["output_tokens"])
    for b in d["content"]:
        if b["type"] == "thinking":
            t.items.append(("reasoning", b["thinking"]))
        elif b["type"] == "text":
            t.items.append(("text", b["text"]))
        elif b["type"] == "tool_use":
            check(isinstance(b["input"], dict) and b["id"], f"messages: tool_use {b}")
            t.items.append(("call", b["name"], b["input"], None))
        else:
            raise Bad(f"messages: block type {b['type']}")
    return t


def messages_stream(text: str) -> Told:
    events = parse_sse(text)
    check(events, "messages stream: empty")
    check(all(isinstance(d, dict) and d.get("type") == n for n, d in events), "messages stream: event name/type")
    names = [n for n, _ in events if n != "ping"]
    check(names[0] == "message_start", f"messages stream: starts {names[0]}")
    check(names[-2:] == ["message_delta", "message_stop"], f"messages stream: ends {names[-2:]}")
    check(names.count("message_delta") == 1 and names.count("message_stop") == 1, "messages stream: one end")
    start = events[0][1]["message"]
    check(start["content"] == [] and start["stop_reason"] is None, "messages stream: message_start")
    blocks: list[dict] = []
    open_index = None
    body = [(n, d) for n, d in events if n != "ping"][1:-2]
    for name, d in body:
        if name == "content_block_start":
            check(open_index is None, "messages stream: a block opened while another is open")
            check(d["index"] == len(blocks), f"messages stream: block index {d['index']} after {len(blocks)}")
            open_index = d["index"]
            blocks.append(dict(d["content_block"], _json=None))
        elif name == "content_block_delta":
            check(d["index"] == open_index, f"messages stream: delta for {d['index']} while {open_index} open")
            block, delta = blocks[open_index], d["delta"]
            want = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "thinking",
                    "input_json_delta": "tool_use"}[delta["type"]]
            check(block["type"] == want, f"messages stream: {delta['type']} in a {block['type']} block")
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                block["_json"] = (block["_json"] or "") + delta["partial_json"]
        elif name == "content_block_stop":
            check(d["index"] == open_index, f"messages stream: stop for {d['index']} while {open_index} open")
            open_index = None
        else:
            raise Bad(f"messages stream: unexpected {name}")
    check(open_index is None, "messages stream: a block never closed")
    end = events[-2][1] if events[-2][0] == "message_delta" else [d for n, d in events if n == "message_delta"][0]
    t = Told(finish=end["delta"]["stop_reason"], stop_sequence=end["delta"]["stop_sequence"],
             output_tokens=end["usage"]["output_tokens"])
    for b in blocks:
        if b["type"] == "thinking":
            t.items.append(("reasoning", b["thinking"]))
        elif b["type"] == "text":
            t.items.append(("text", b["text"]))
        else:
            t.items.append(("call", b["name"], sdk_input(b["_json"], b["input"]), None))
    return t


# Ollama ----------------------------------------------------------------------------------------------------
def ollama_told(parts: list[dict], end: dict) -> Told:
    t = Told(finish=end["done_reason"], output_tokens=end["eval_count"])
    for kind, key in (("reasoning", "thinking"), ("text", "content")):
        text = "".join(p["message"].get(key) or "" for p in parts)
        if text:
            t.items.append((kind, text))
    for p in parts:
        for c in p["message"].get("tool_calls") or []:
            check(isinstance(c["function"]["arguments"], dict), f"ollama: arguments not an object {c}")
            t.items.append(("call", c["function"]["name"], c["function"]["arguments"], None))
    for k in ("total_duration", "prompt_eval_count", "prompt_eval_duration", "eval_duration"):
        check(isinstance(end.get(k), int) and end[k] >= 0, f"ollama: {k} = {end.get(k)!r}")
    return t


def ollama_nonstream(d: dict) -> Told:
    check(d.get("done") is True and d["message"]["role"] == "assistant", f"ollama: shape {d}")
    return ollama_told([d], d)


def ollama_stream(text: str) -> Told:
    lines = [json.loads(line) for line in text.splitlines()]
    check(lines and all("error" not in x for x in lines), f"ollama stream: an error line {lines[-1:]}")
    check([x["done"] for x in lines] == [False] * (len(lines) - 1) + [True], "ollama stream: done only last")
    return ollama_told(lines, lines[-1])

