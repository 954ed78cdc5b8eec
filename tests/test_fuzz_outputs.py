"""Adversarial raw model outputs through all four protocols, streaming and not: invariants, not exact bytes.

Each case is a raw model output (random fragments: reasoning and tool-call markers, whole, broken and
truncated call JSON, braces, quotes, backslashes, emoji / CJK / combining marks, whitespace, plain words),
with or without a declared function tool ``f``, sometimes an output cap, sometimes a client stop string.
One scripted server answers every request of a chunk of cases; each case is asked eight times — Chat
Completions, Responses, Messages and Ollama's /api/chat, each non-streaming and streaming — and these must hold:

- HTTP 200; each stream well-formed for its protocol (Chat: chunks, one finish, then ``[DONE]``; Responses:
  ``sequence_number`` 0, 1, 2 … from ``response.created`` to ``response.completed`` / ``.incomplete``, items
  opened in order, each closed, every ``.done`` equal to its deltas; Messages: ``message_start`` …
  ``message_stop``, content blocks opened in index order, one at a time, each closed; Ollama: JSON lines,
  every one ``done: false`` but the last);
- the non-stream answer is what the stream describes (text, reasoning, tool names and arguments, finish /
  stop reason, output tokens);
- the protocols tell the same story (same items in the same order, same finish, same token counts;
  Messages' ``input`` and Ollama's ``arguments`` are the arguments' JSON object, ``{}`` for anything else);
- the finish reason and output tokens follow from the token count, the cap and the calls;
- a completed (not cut) call's arguments are a JSON object;
- every plain word of the output that survived the cap and the stop string appears in text, reasoning or
  arguments, and no word comes back more often than the model wrote it;
- the engine is idle afterwards (``running == waiting == 0``).

Deterministic: ``TINYTITAN_FUZZ_SEED`` (default 20251130) and ``TINYTITAN_FUZZ_CASES`` (default 128) pick the
cases. A failure lists each bad case with its raw output and request, ready to paste into a test.
Bugs found this way are pinned below by minimal reproductions. Arguments a model writes as invalid JSON (or
JSON that is not an object) are passed through as written on the OpenAI protocols (as OpenAI's own API may:
clients validate them and tell the model) and become ``{}`` on Messages; the fragments that make them are
kept out of the random cases (``PASSED_THROUGH``), whose invariants assume JSON objects, and are tested below.
"""

from __future__ import annotations

import json
import os
import random
import re
import unicodedata
from dataclasses import dataclass, field

import httpx
import pytest
import trio
from jiter import from_json  # what the anthropic SDK reads input_json_delta with

from sse import parse_sse
from tinytitan.protocols.common import RUN_BREAK

MODEL = "tinytitan-scripted"
SEED = int(os.environ.get("TINYTITAN_FUZZ_SEED", "20251130"))
CASES = int(os.environ.get("TINYTITAN_FUZZ_CASES", "128"))
CHUNKS = 4  # one server per chunk (pytest shows which chunk failed; the message lists the cases)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "q": {"type": "string"}}}
TOOLS = {
    "chat": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": SCHEMA}}],
    "responses": [{"type": "function", "name": "f", "description": "d", "parameters": SCHEMA}],
    "messages": [{"name": "f", "description": "d", "input_schema": SCHEMA}],
    "ollama": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": SCHEMA}}],
}
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "x"}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages",
         "ollama": "/api/chat"}
PROTOCOLS = tuple(PATHS)

# -- the words whose survival is checked ---------------------------------------------------------------------
ASCII_WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
               "lima", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "victor", "whiskey", "yankee", "zulu"]
UNICODE_WORDS = ["日本語", "漢字テスト", "e\u0301clair", "nai\u0308ve", "🙂", "👩\u200d💻", "שלום", "Ωμέγα"]
WORDS = ASCII_WORDS + UNICODE_WORDS
W = "@W@"  # where a fragment takes a word

MARKUP = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
CALLS = [
    '{"name": "f", "arguments": {"a": 1}}',
    '{"name": "f", "arguments": {"q": "@W@"}}',
    '{"name": "f", "arguments": {"q": {"b": [1, {"c": "@W@ } ] {"}]}}}',  # braces inside a string
    '{"name": "f", "arguments": {"q": "say \\"@W@\\" \\\\ back\\\\"}}',  # escaped quotes and backslashes
    '{"name": "f", "arguments": "{\\"q\\": \\"@W@\\"}"}',  # arguments as a JSON string holding JSON
    '{"arguments": {"q": "@W@"}, "name": "f"}',  # the other key order
    '{"name": "f", "parameters": {"q": "@W@"}}',
    '{"name": "unknown_tool", "arguments": {"q": "@W@"}}',
    '{"name": "f", "arguments": {"q": "@W@ 🚀 中文 e\u0301"}}',
    '{"name": "f", "arguments": {}}, {"name": "f", "arguments": {"a": 2}}',  # two calls in one block
    '{"name": "f", "arguments": {"a": 1}}\n{"name": "f", "arguments": {"q": "@W@"}}',
    '{"name": "f", "arguments": {"a": 1}} @W@',  # text after a complete call, inside the block
    '{"name": "f", "arguments": {"a": 1}',  # the call object never closes
    '{"name": "f", "arguments": {"q": "@W@',  # cut inside a string
    '{"name": "unknown_tool"',  # cut after the name
    '{"name": "f", "arguments": {"a": tru}}',  # not JSON
    '{"name": "f", "arguments": 5}',  # not an object
    '{"name": "f", "arguments": [1, "@W@"]}',  # not an object
    '{"name": "f", "arguments": {"a": 1}, "id": "x{"}',  # an extra key after the arguments
    '{"name": "f"}',  # no arguments at all
    '{"name": "", "arguments": {}}',  # an empty name
]
JUNK = ['{', '}', '{}', '"', '\\', '\\"', '{"a": {"b": {"c": {}}}}', '[', ']', ':', ',', '{"name": ',
        '"arguments": ', '</', '<', '<tool', '_call>', '<thi', 'nk>', '</think', '{"q": "@W@"}', "'", "`"]
SPACE = [" ", "\n", "\n\n", "\t", " \n  ", "\r\n"]

# Fragments whose calls carry arguments that are not a JSON object, passed through as the model wrote them
# (test_arguments_that_are_not_a_json_object_are_passed_through): kept out of the random cases.
PASSED_THROUGH = {
    '{"name": "f", "arguments": {"a": tru}}',
    '{"name": "f", "arguments": 5}',
    '{"name": "f", "arguments": [1, "@W@"]}',
}


def _words_are_distinct() -> bool:
    fixed = " ".join(MARKUP + CALLS + JUNK).replace(W, " ")
    return all(unicodedata.normalize("NFC", a) not in unicodedata.normalize("NFC", b)
               for a in WORDS for b in WORDS + [fixed] if a is not b)


def _fill(frag: str, rng: random.Random) -> str:
    while W in frag:
        frag = frag.replace(W, rng.choice(WORDS), 1)
    return frag


def _words(rng: random.Random, lo: int = 1, hi: int = 4) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]


def _pick(rng: random.Random, pool: list[str]) -> str:
    choices = [f for f in pool if f not in PASSED_THROUGH]
    return _fill(rng.choice(choices), rng)


def chaos(rng: random.Random) -> list[str]:
    pools = [(MARKUP, 4), (CALLS, 3), (JUNK, 2), (SPACE, 2), (WORDS, 4)]
    out = []
    for _ in range(rng.randint(1, 14)):
        pool = rng.choices([p for p, _ in pools], [w for _, w in pools])[0]
        out.append(_pick(rng, pool))
    return out


def structured(rng: random.Random) -> list[str]:
    """Mostly well-formed output (answer, thoughts, calls in the usual order), then a few mutations."""
    out: list[str] = []
    if rng.random() < 0.5:
        out += ["<think>", *_words(rng), "</think>"]
    if rng.random() < 0.7:
        out += _words(rng)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        out += ["<tool_call>", "\n", _pick(rng, CALLS), "\n", "</tool_call>"]
    if rng.random() < 0.3:
        out += _words(rng)
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        op = rng.choice(["drop", "dup", "insert", "swap"])
        i = rng.randrange(len(out)) if out else 0
        if op == "drop" and out:
            del out[i]
        elif op == "dup" and out:
            out.insert(i, out[i])
        elif op == "insert":
            out.insert(i, _pick(rng, rng.choice([MARKUP, JUNK, SPACE, WORDS])))
        elif op == "swap" and len(out) > 1:
            j = rng.randrange(len(out))
            out[i], out[j] = out[j], out[i]
    return out or _words(rng)


@dataclass
class Case:
    n: int
    output: str
    tools: bool
    cap: int | None
    stop: list[str] = field(default_factory=list)
    tool_choice: str | None = None  # "none": the tool is declared, calls are not allowed

    @property
    def calls_allowed(self) -> bool:
        return self.tools and self.tool_choice != "none"

    def __str__(self) -> str:
        return (f"case {self.n}: output={self.output!r} tools={self.tools} tool_choice={self.tool_choice} "
                f"cap={self.cap} stop={self.stop}")


# outputs every run tries first: empty, whitespace, lone and empty markers, an answer that never closes
EDGES = ["", " ", "\n\n", "<think>", "</think>", "<tool_call>", "</tool_call>", "<think></think>",
         "<tool_call></tool_call>", "<think>\n\n</think>\n\n", "<tool_call>\n{}\n</tool_call>", "<think>alpha",
         '<tool_call>{"name": "f", "arguments": {"a": 1}}', "<tool_call>bravo</tool_call>",
         "charlie<think>delta</think>echo<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>golf"]


def make_case(n: int, rng: random.Random, tok) -> Case:
    frags = structured(rng) if rng.random() < 0.55 else chaos(rng)
    seps = ["", "", " ", "\n"]
    text = frags[0]
    for f in frags[1:]:
        text += rng.choice(seps) + f
    tools = rng.random() < 0.75
    tool_choice = "none" if tools and rng.random() < 0.15 else None
    cap = None
    if rng.random() < (0.5 if "<tool_call>" in text else 0.3):
        ids = tok.encode(text, add_special_tokens=False)
        opens = [k for k, i in enumerate(ids) if tok.decode([i]) == "<tool_call>"]
        roll = rng.random()
        if opens and roll < 0.4:  # inside a call: after its name, in its arguments, before its end
            cap = rng.choice(opens) + rng.randint(1, 20)
        elif roll < 0.8:
            cap = rng.randint(1, 40)
        else:
            cap = max(1, len(ids) + rng.randint(-2, 1))
    stop: list[str] = []
    if rng.random() < 0.25:
        present = [w for w in WORDS if w in text]
        options = ["</tool_call>", "<tool_call>", "}", '"', "zzz-never", "</think>", "\\", "<", "nk>", "a"]
        if present:
            options += [rng.choice(present)] * 3
        for _ in range(3):  # any piece of the output, markup and all
            i = rng.randrange(len(text))
            piece = text[i: i + rng.randint(2, 8)]
            if piece.strip():
                options.append(piece)
        stop = [rng.choice(options)]
        if rng.random() < 0.3:
            stop.append(rng.choice(options))
        stop = list(dict.fromkeys(stop))
    return Case(n, text, tools, cap, stop, tool_choice)


def test_the_words_are_distinct():
    assert _words_are_distinct()


def all_cases(tok) -> list[Case]:
    rng = random.Random(SEED)
    edges = [Case(n, out, tools=n % 2 == 0, cap=None) for n, out in enumerate(EDGES)]
    return edges + [make_case(n, rng, tok) for n in range(len(edges), CASES)]


# -- requests ------------------------------------------------------------------------------------------------
def request_body(proto: str, case: Case, stream: bool) -> dict:
    msgs = [{"role": "user", "content": "hi"}]
    if proto == "chat":
        b: dict = {"model": MODEL, "messages": msgs, "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        if case.cap is not None:
            b["max_tokens"] = case.cap
        if case.stop:
            b["stop"] = case.stop
    elif proto == "responses":  # no stop strings in this API
        b = {"model": MODEL, "input": "hi", "stream": stream, "store": False}
        if case.cap is not None:
            b["max_output_tokens"] = case.cap
    elif proto == "ollama":  # no tool_choice in this API: 'none' is a request without tools
        b = {"model": MODEL + ":latest", "messages": msgs, "stream": stream,
             "options": {"num_predict": case.cap or -1, **({"stop": case.stop} if case.stop else {})}}
        if case.tools and case.tool_choice != "none":
            b["tools"] = TOOLS[proto]
        return b
    else:
        b = {"model": MODEL, "messages": msgs, "stream": stream, "max_tokens": case.cap or 4096}
        if case.stop:
            b["stop_sequences"] = case.stop
    if case.tools:
        b["tools"] = TOOLS[proto]
    if case.tool_choice:
        b["tool_choice"] = {"type": case.tool_choice} if proto == "messages" else case.tool_choice
    return b


async def ask(client: httpx.AsyncClient, s, proto: str, case: Case, stream: bool) -> httpx.Response:
    headers = ANTHROPIC_HEADERS if proto == "messages" else {}
    return await client.post(s.url(PATHS[proto]), json=request_body(proto, case, stream), headers=headers)


# -- what an answer says, the same shape for every protocol ---------------------------------------------------
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


# -- the invariants ----------------------------------------------------------------------------------------------
def anonymous(resp: dict) -> dict:
    """A Responses object without what differs between two runs of one answer (ids, times)."""
    out = {k: v for k, v in resp.items() if k not in ("id", "created_at", "completed_at")}
    out["output"] = [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in resp["output"]]
    return out


def strip_complete(told: Told) -> list:
    return [i[:3] if i[0] == "call" else i for i in told.items]


def same(a: Told, b: Told, what: str, tokens: bool = True) -> None:
    check(strip_complete(a) == strip_complete(b), f"{what}: items differ\n  {strip_complete(a)}\n  {strip_complete(b)}")
    check(a.finish == b.finish, f"{what}: finish {a.finish!r} vs {b.finish!r}")
    check(a.stop_sequence == b.stop_sequence, f"{what}: stop_sequence {a.stop_sequence!r} vs {b.stop_sequence!r}")
    if tokens:
        check(a.output_tokens == b.output_tokens, f"{what}: output tokens {a.output_tokens} vs {b.output_tokens}")
        check(a.reasoning_tokens == b.reasoning_tokens, f"{what}: reasoning tokens")


FINISH = {"end_turn": ("stop", "completed"), "max_tokens": ("length", "incomplete"),
          "stop_sequence": ("stop", "completed"), "tool_use": ("tool_calls", "completed")}


def count_word(word: str, text: str, bounded: bool = False) -> int:
    """Occurrences as a substring (no word is part of another, nor of the markup): Chat joins the text runs
    around a reasoning block with no separator, so word boundaries are not kept there. ``bounded``:
    whole ASCII words only (joined runs can spell a word across the seam: quebec + hotel holds echo)."""
    word = unicodedata.normalize("NFC", word)  # the demo tokenizer normalises: e + U+0301 reads back as é
    if bounded and word.isascii():
        return len(re.findall(rf"(?<![A-Za-z]){re.escape(word)}(?![A-Za-z])", text))
    return text.count(word)


def told_text(t: Told) -> str:
    """Everything an answer carries, for counting words: text, reasoning, names, arguments (as written)."""
    parts = []
    for i in t.items:
        parts.append(i[1])
        if i[0] == "call":
            parts.append(i[2] if isinstance(i[2], str) else json.dumps(i[2], ensure_ascii=False))
    return "\n".join(parts)


def check_case(case: Case, tok, answers: dict) -> None:
    chat_ns, chat_s = answers["chat"]
    (resp_ns, resp_object), (resp_s, resp_final) = answers["responses"]
    msg_ns, msg_s = answers["messages"]
    oll_ns, oll_s = answers["ollama"]

    # the non-stream answer is what the stream describes
    same(chat_ns, chat_s, "chat non-stream vs stream")
    same(resp_ns, resp_s, "responses non-stream vs stream")
    if (msg_ns.finish == "max_tokens" and msg_s.items and msg_s.items[-1][0] == "call"
            and msg_ns.items and msg_ns.items[-1][:3] == msg_s.items[-1][:2] + ({},)):
        # a call the cap cut: the SDK reads the stream's partial JSON (a partial object), the fold sends {}
        # (test_known_messages_cut_call_stream_and_fold_disagree); the rest must agree
        msg_s = Told(msg_s.items[:-1] + [msg_ns.items[-1]], msg_s.finish, msg_s.stop_sequence, msg_s.output_tokens)
    same(msg_ns, msg_s, "messages non-stream vs stream")
    same(oll_ns, oll_s, "ollama non-stream vs stream")
    check(anonymous(resp_object) == anonymous(resp_final), "responses: the non-stream object is not the stream's "
                                                           f"final one\n  {resp_object}\n  {resp_final}")

    ids = tok.encode(case.output, add_special_tokens=False)
    generated = tok.decode(ids)  # what the model wrote, as its tokens read back (NFC here)
    n_expected = len(ids) if case.cap is None else min(case.cap, len(ids))
    # the cap reached on the script's last token cuts it too: the end of turn would have been the next token, as
    # for a model whose max_tokens runs out just before its end-of-sequence (every row ends at its cap, Row.accept)
    cut = case.cap is not None and case.cap <= len(ids)
    stopped = msg_ns.finish == "stop_sequence"
    # a stop string matched after whole calls ends a turn that called tools: tool_use, no stop_sequence
    after_calls = bool(case.stop) and msg_ns.finish == "tool_use"

    # the three protocols tell one story (Responses takes no stop strings: compared only without them)
    check(chat_ns.finish == FINISH[msg_ns.finish][0], f"chat finish {chat_ns.finish} vs messages {msg_ns.finish}")
    check(chat_ns.output_tokens == msg_ns.output_tokens, "chat vs messages output tokens")
    # Chat folds text and reasoning into one string each; its calls keep their order
    expect_chat = Told()
    if msg_ns.texts("reasoning"):
        expect_chat.items.append(("reasoning", msg_ns.texts("reasoning")))
    if msg_ns.texts("text"):
        expect_chat.items.append(("text", msg_ns.one_string()))
    check([i for i in chat_ns.items if i[0] != "call"] == expect_chat.items,
          f"chat vs messages text/reasoning\n  {chat_ns.items}\n  {msg_ns.items}")
    chat_calls = [(c[1], tool_input(c[2]) or {}) for c in chat_ns.calls()]
    msg_calls = [(c[1], c[2]) for c in msg_ns.calls()]
    check(chat_calls == msg_calls, f"chat vs messages calls\n  {chat_calls}\n  {msg_calls}")
    # Ollama folds like Chat, sends arguments as Messages does, and says only stop or length
    check([i for i in oll_ns.items if i[0] != "call"] == expect_chat.items,
          f"ollama vs messages text/reasoning\n  {oll_ns.items}\n  {msg_ns.items}")
    check([(c[1], c[2]) for c in oll_ns.calls()] == msg_calls, f"ollama vs messages calls {oll_ns.calls()}")
    check(oll_ns.finish == ("length" if msg_ns.finish == "max_tokens" else "stop"), f"ollama {oll_ns.finish}")
    check(oll_ns.output_tokens == msg_ns.output_tokens, "ollama vs messages output tokens")
    check(resp_ns.finish == ("incomplete" if cut else "completed"), f"responses {resp_ns.finish}, cut={cut}")
    check(resp_ns.output_tokens == n_expected, f"responses output tokens {resp_ns.output_tokens}, expected "
                                               f"{n_expected}")
    if not case.stop:
        check(resp_ns.finish == FINISH[msg_ns.finish][1], f"responses {resp_ns.finish} vs messages {msg_ns.finish}")
        check(resp_ns.output_tokens == msg_ns.output_tokens, "responses vs messages output tokens")
        check(resp_ns.reasoning_tokens == chat_ns.reasoning_tokens, "responses vs chat reasoning tokens")
        kinds = [i[0] for i in resp_ns.items]
        check(kinds == [i[0] for i in msg_ns.items], f"responses vs messages item order\n  {resp_ns.items}\n  "
                                                     f"{msg_ns.items}")
        for r, m in zip(resp_ns.items, msg_ns.items):
            if r[0] == "call":
                check(r[1] == m[1] and (tool_input(r[2]) or {}) == m[2], f"responses vs messages call {r} {m}")
            else:
                check(r == m, f"responses vs messages {r[0]}: {r[1]!r} vs {m[1]!r}")
        check([c[1:3] for c in resp_ns.calls()] == [c[1:3] for c in chat_ns.calls()],
              f"responses vs chat calls {resp_ns.calls()} {chat_ns.calls()}")

    # finish reason and token count follow from the output, the cap and the calls
    if after_calls:
        check(msg_ns.stop_sequence is None, "stop_sequence set on a tool turn")
        check(msg_ns.output_tokens <= n_expected, "more tokens than the output has")
    elif not stopped:
        check(msg_ns.output_tokens == n_expected, f"output tokens {msg_ns.output_tokens}, expected {n_expected}")
        want = "max_tokens" if cut else "tool_use" if msg_ns.calls() else "end_turn"
        check(msg_ns.finish == want, f"stop_reason {msg_ns.finish}, expected {want}")
        check(msg_ns.stop_sequence is None, "stop_sequence set without a stop")
    else:
        check(msg_ns.stop_sequence in case.stop, f"stop_sequence {msg_ns.stop_sequence!r} not sent")
        check(msg_ns.output_tokens <= n_expected, "more tokens than the output has")
    check(chat_ns.reasoning_tokens <= chat_ns.output_tokens, "reasoning tokens over output tokens")
    for told in (chat_ns, resp_ns, msg_ns):
        for c in told.calls():
            check(isinstance(c[1], str) and c[1], f"a call without a name: {c}")
    if not case.calls_allowed:
        check(not chat_ns.calls() and not msg_ns.calls() and not resp_ns.calls(), "a call where none is allowed")

    # completed calls carry a JSON object (Chat cannot say a call is incomplete: Responses says it for both)
    resp_complete = [c[3] for c in resp_ns.calls()]
    for proto, told in (("chat", chat_ns), ("responses", resp_ns)):
        calls = told.calls()
        for k, c in enumerate(calls):
            complete = resp_complete[k] if k < len(resp_complete) and resp_complete[k] is not None else \
                not (cut and k == len(calls) - 1)
            if complete:
                try:
                    value = json.loads(c[2])
                except ValueError:
                    value = None
                check(isinstance(value, dict), f"{proto}: completed call {c[1]!r} arguments not a JSON object: "
                                               f"{c[2]!r}")
    for k, c in enumerate(resp_ns.items):  # the cap cuts only the last item; else markup ended in the arguments
        if c[0] == "call" and c[3] is False:
            check((cut and k == len(resp_ns.items) - 1) or not isinstance(tool_input(c[2]), dict),
                  f"responses: an incomplete call {c} (cut={cut}, item {k})")

    # words: what survived the cap and the stop string is all there, nothing more often than written
    kept = tok.decode(ids[: n_expected]) if cut else generated
    survived = kept  # Responses takes no stop strings: all it keeps is what the cap left
    if stopped:
        at = kept.find(msg_ns.stop_sequence)
        check(at >= 0, f"stopped at {msg_ns.stop_sequence!r}, which the output does not hold")
        survived = kept[: at]
    elif after_calls:  # which stop string matched is not told: the earliest any could have (asks no more)
        survived = kept[: min([kept.find(x) for x in case.stop if x in kept], default=len(kept))]
    for proto, told in (("chat", chat_ns), ("messages", msg_ns), ("responses", resp_ns), ("ollama", oll_ns)):
        region = kept if proto == "responses" else survived
        have = told_text(told)
        for w in WORDS:
            raw_n = count_word(w, generated)
            got = count_word(w, have, bounded=True)
            check(got <= raw_n, f"{proto}: {w!r} comes back {got} times, written {raw_n}")
            if proto in ("messages", "ollama"):
                continue  # arguments that are not an object become {} there (checked against chat above)
            need, got = count_word(w, region), count_word(w, have)
            check(got >= need, f"{proto}: {w!r} lost: {got} of {need} in {told.items}")


async def answer(client: httpx.AsyncClient, s, case: Case) -> dict:
    """The eight answers to one case (request k of the server's script must be this case's output)."""
    answers: dict = {}
    for proto in PROTOCOLS:
        pair = []
        for stream in (False, True):
            r = await ask(client, s, proto, case, stream)
            check(r.status_code == 200, f"{proto} stream={stream}: HTTP {r.status_code} {r.text[:300]}")
            if stream:
                check(r.headers["content-type"].startswith("application/x-ndjson" if proto == "ollama" else
                                                           "text/event-stream"), "stream content-type")
                pair.append({"chat": chat_stream, "responses": responses_stream, "messages": messages_stream,
                             "ollama": ollama_stream}[proto](r.text))
            else:
                d = r.json()
                pair.append((responses_items(d), d) if proto == "responses" else
                            {"chat": chat_nonstream, "messages": messages_nonstream,
                             "ollama": ollama_nonstream}[proto](d))
        answers[proto] = pair
    return answers


async def run_cases(serve, tok, cases: list[Case]) -> list[str]:
    s = await serve([c.output for c in cases for _ in range(2 * len(PROTOCOLS))])
    failures = []
    async with httpx.AsyncClient(timeout=30) as client:
        for case in cases:
            try:
                check_case(case, tok, await answer(client, s, case))
            except Bad as exc:
                failures.append(f"{case}\n    {exc}")
            except Exception as exc:  # a KeyError in a malformed answer is a finding too
                failures.append(f"{case}\n    {type(exc).__name__}: {exc}")
            try:
                with trio.fail_after(20):  # (a request's place is given back once its answer is sent)
                    while s.engine.running or s.engine.waiting:
                        await trio.sleep(0.01)
            except trio.TooSlowError:
                failures.append(f"{case}\n    engine not idle after 20 s: running={s.engine.running} "
                                f"waiting={s.engine.waiting}")
    return failures


@pytest.mark.parametrize("chunk", range(CHUNKS))
async def test_fuzz_outputs(serve, demo_tok, chunk):
    cases = all_cases(demo_tok)[chunk::CHUNKS]
    failures = await run_cases(serve, demo_tok, cases)
    assert not failures, f"{len(failures)} of {len(cases)} cases broke an invariant (seed {SEED}):\n" + \
        "\n".join(failures)


# -- known bugs, minimal reproductions (strict: each must fail until its bug is fixed; then move its
#    fragment out of KNOWN_BAD) ---------------------------------------------------------------------------------
async def assert_case_holds(serve, tok, output: str, tools: bool = True, cap: int | None = None,
                            stop: list[str] | None = None) -> None:
    case = Case(0, output, tools, cap, stop or [])
    failures = await run_cases(serve, tok, [case])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("arguments", ['{"a": tru}', "5", '[1, "x"]'])
async def test_arguments_that_are_not_a_json_object_are_passed_through(serve, demo_tok, arguments):
    """The model's own arguments on Chat and Responses (a completed call: the client validates them and tells
    the model); ``{}`` on Messages, streamed and folded alike (a partial-JSON parser never sees them)."""
    output = '<tool_call>\n{"name": "f", "arguments": ' + arguments + '}\n</tool_call>'
    case = Case(0, output, True, None)
    s = await serve([output])
    async with httpx.AsyncClient(timeout=30) as client:
        chat = chat_nonstream((await ask(client, s, "chat", case, False)).json())
        chat_s = chat_stream((await ask(client, s, "chat", case, True)).text)
        resp = responses_items((await ask(client, s, "responses", case, False)).json())
        folded = messages_nonstream((await ask(client, s, "messages", case, False)).json())
        streamed = messages_stream((await ask(client, s, "messages", case, True)).text)
    assert [c[:3] for c in chat.calls()] == [c[:3] for c in chat_s.calls()] == [("call", "f", arguments)]
    assert resp.calls() == [("call", "f", arguments, True)]
    assert folded.calls() == streamed.calls() == [("call", "f", {}, None)]


async def test_a_call_closed_inside_its_arguments_is_incomplete(serve, demo_tok):
    output = '<tool_call>\n{"name": "f", "arguments": {"q": "tango</tool_call>'
    await assert_case_holds(serve, demo_tok, output)
    s = await serve([output])
    async with httpx.AsyncClient(timeout=30) as client:
        resp = responses_items((await ask(client, s, "responses", Case(0, output, True, None), False)).json())
    assert resp.calls() == [("call", "f", '{"q": "tango', False)]


@pytest.mark.parametrize("output", [
    '<tool_call>\n{"name": "f", "arguments": {"a": 1}\nbravo\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": {"a": 1}\n{"name": "f", "arguments": {"q": "bravo"}}\n</tool_call>',
])
async def test_text_after_an_unclosed_call_object_is_kept(serve, demo_tok, output):
    await assert_case_holds(serve, demo_tok, output)


async def test_a_call_with_an_empty_name_is_text(serve, demo_tok):
    await assert_case_holds(serve, demo_tok, '<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>')


async def test_messages_a_call_cut_by_the_cap_is_the_same_streamed_and_folded(serve, demo_tok):
    output = '<tool_call>\n{"name": "f", "arguments": {"q": {"b": [1, {"c": "long string here"}]}}}\n</tool_call>'
    ids = demo_tok.encode(output, add_special_tokens=False)
    cap = next(n for n in range(1, len(ids)) if demo_tok.decode(ids[:n]).endswith('[1,'))
    s = await serve([output])
    async with httpx.AsyncClient(timeout=30) as client:
        case = Case(0, output, True, cap)
        folded = messages_nonstream((await ask(client, s, "messages", case, False)).json())
        streamed = messages_stream((await ask(client, s, "messages", case, True)).text)
    assert folded.finish == streamed.finish == "max_tokens"
    assert folded.calls() == streamed.calls() == [("call", "f", {}, None)]
