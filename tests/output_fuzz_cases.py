"""The cases of the output fuzz (tests/test_fuzz_outputs.py): raw model outputs made of random fragments, and the
request that asks each case of each protocol, streaming or not."""

from __future__ import annotations

import os
import random
import unicodedata
from dataclasses import dataclass, field

import httpx

MODEL = "tinytitan-scripted"
SEED = int(os.environ.get("TINYTITAN_FUZZ_SEED", "20251130"))
CASES = int(os.environ.get("TINYTITAN_FUZZ_CASES", "128"))

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



def words_are_distinct() -> bool:
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

