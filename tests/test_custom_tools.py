"""Custom (freeform) tools on the Responses API: Codex's ``apply_patch`` with its Lark grammar.

The model sees a custom tool as a function of one string, ``input``; its call comes back as a
``custom_tool_call`` item (with ``response.custom_tool_call_input.delta`` / ``.done`` events), and
``custom_tool_call_output`` items go back in. While the model writes a grammar-formatted tool's input, the
sampler is masked with that grammar (rewritten for the JSON string the input is written in).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from responses_helpers import client, record_prompts, sse_events
from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar
from tinytitan.engine.structured.escaped import escaped_lark_rules

APPLY_PATCH = (Path(__file__).parent / "data" / "apply_patch.lark").read_text()  # as Codex sends it
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello \"world\" \\ é\n*** End Patch\n"
CODEX_TOOL = {"type": "custom", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.",
              "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH}}
MODEL = "tinytitan-scripted"


def call_text(name: str, tool_input: str) -> str:
    """A call as the mask lets the model write it (the template's spaced JSON, the input's one spelling)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"input": tool_input}},
                                         ensure_ascii=False) + "\n</tool_call>"


def matches(tokenizer, grammar_text: str, text: str) -> bool:
    compiled = compile_grammar(Grammar("lark", grammar_text), tokenizer)
    matcher = compiled.matcher()
    tokens = compiled.tokenizer.tokenize_str(text)
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


@pytest.mark.parametrize("patch,ok", [
    (PATCH, True),
    ("*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    return 1\n+    return 2\n*** End Patch", True),
    ("*** Begin Patch\n*** Frob File: a\n*** End Patch\n", False),
    ("*** Begin Patch\n*** Add File: a\nno plus sign\n*** End Patch\n", False),
])
def test_the_escaped_grammar_matches_exactly_the_escaped_texts(demo_tok, patch, ok):
    rules, start = escaped_lark_rules(Grammar("lark", APPLY_PATCH, where="g"), "c")
    escaped = json.dumps(patch, ensure_ascii=False)[1:-1]
    assert matches(demo_tok, "\n".join([f"start: {start}", *rules]), escaped) is ok
    assert matches(demo_tok, APPLY_PATCH, patch) is ok  # the grammar as sent agrees on the raw text


async def test_a_custom_tool_call_round_trip(serve):
    s = await serve([call_text("apply_patch", PATCH), "Patched."])
    prompts = record_prompts(s)
    body = {"model": MODEL, "input": "add hello.txt", "tools": [CODEX_TOOL], "stream": True, "store": False}
    events = await sse_events(s, body)
    names = [name for name, _ in events]
    deltas = "".join(d["delta"] for name, d in events if name == "response.custom_tool_call_input.delta")
    (done,) = [d for name, d in events if name == "response.custom_tool_call_input.done"]
    assert deltas == done["input"] == PATCH
    assert "response.function_call_arguments.delta" not in names
    item = events[-1][1]["response"]["output"][-1]
    assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch" and item["input"] == PATCH
    assert item["call_id"] and item["status"] == "completed" and item["id"].startswith("ctc_")
    # the tool reached the model as a function of one string, its grammar in the description
    (tool,) = prompts[0].req.tools
    assert tool.custom and tool.parameters["required"] == ["input"] and "Begin Patch" in \
        tool.parameters["properties"]["input"]["description"]
    # the call and its output go back in; the SDK types them
    r = await client(s).responses.create(model=MODEL, tools=[CODEX_TOOL], input=[
        {"type": "message", "role": "user", "content": "add hello.txt"},
        {"type": "custom_tool_call", "call_id": item["call_id"], "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "Done!"}])
    assert r.output_text == "Patched."
    assert "Done!" in prompts[1].prompt_text and "Begin Patch" in prompts[1].prompt_text


async def test_the_sdk_reads_a_custom_tool_call(serve):
    s = await serve([call_text("apply_patch", PATCH)])
    r = await client(s).responses.create(model=MODEL, input="add hello.txt", tools=[CODEX_TOOL])
    (call,) = [o for o in r.output if o.type == "custom_tool_call"]
    assert call.input == PATCH and call.name == "apply_patch"


@pytest.mark.parametrize("fmt,needle", [
    ({"type": "grammar", "syntax": "lark", "definition": "start: (("}, "not a valid Lark grammar"),
    ({"type": "grammar", "syntax": "regex", "definition": "(?=a)b"}, "look-around"),
    ({"type": "grammar", "syntax": "lark", "definition": 'start: "a"\n%ignore " "'}, "%ignore"),
    ({"type": "grammar", "syntax": "ebnf", "definition": "x"}, "format.syntax"),
])
async def test_a_grammar_the_engine_cannot_compile_is_refused_by_name(serve, fmt, needle):
    s = await serve(["never generated"])
    tool = {"type": "custom", "name": "t", "format": fmt}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": "x", "tools": [tool]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert needle in error["message"] and error["param"].startswith("tools[0].format"), error


# a Codex-style patch grammar with bounded names and lines: a random-weight model ends its patch within the cap
BOUNDED = r'''
start: "*** Begin Patch" LF hunk hunk? "*** End Patch" LF?
hunk: "*** Add File: " NAME LF ("+" LINE LF)~1..3 | "*** Delete File: " NAME LF
NAME: /[a-z]{1,8}\.(txt|py)/
LINE: /[a-z ]{0,12}/
LF: "\n"
'''


async def test_the_mask_holds_a_forced_custom_tool_to_its_grammar(serve, demo_backend):
    s = await serve(backend=demo_backend)
    tool = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                                "definition": BOUNDED}}
    other = {"type": "function", "name": "noop", "parameters": {"type": "object", "properties": {},
                                                                 "additionalProperties": False}}
    for sampling in [{"temperature": 0}, {"temperature": 1, "seed": 1}, {"temperature": 1, "seed": 2}]:
        r = await client(s).responses.create(
            model=demo_backend.model_id, input="add a file", tools=[tool, other], max_output_tokens=200,
            tool_choice={"type": "custom", "name": "apply_patch"}, store=False, parallel_tool_calls=False,
            temperature=sampling["temperature"], extra_body={"seed": sampling.get("seed")})
        assert r.status == "completed", json.dumps([o.model_dump() for o in r.output])
        (call,) = [o for o in r.output if o.type == "custom_tool_call"]
        assert call.name == "apply_patch"
        assert matches(demo_backend.tokenizer, BOUNDED, call.input), call.input


CHAT_TOOL = {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files.",
                                          "format": {"type": "grammar", "grammar": {"syntax": "lark",
                                                                                    "definition": APPLY_PATCH}}}}


async def test_chat_completions_custom_tools(serve):
    from chat_helpers import client as chat_client

    s = await serve([call_text("apply_patch", PATCH), call_text("apply_patch", PATCH), "Patched."])
    prompts = record_prompts(s)
    user = [{"role": "user", "content": "add hello.txt"}]
    r = await chat_client(s).chat.completions.create(model=MODEL, messages=user, tools=[CHAT_TOOL])
    (call,) = r.choices[0].message.tool_calls
    assert call.type == "custom" and call.custom.name == "apply_patch" and call.custom.input == PATCH
    assert r.choices[0].finish_reason == "tool_calls"
    stream = await chat_client(s).chat.completions.create(model=MODEL, messages=user, tools=[CHAT_TOOL], stream=True)
    streamed = ""
    async for chunk in stream:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert tc.type in (None, "custom")
            streamed += ((tc.model_extra or {}).get("custom") or {}).get("input") or ""
    assert streamed == PATCH
    back = user + [{"role": "assistant", "tool_calls": [{"id": call.id, "type": "custom",
                                                         "custom": {"name": "apply_patch", "input": PATCH}}]},
                   {"role": "tool", "tool_call_id": call.id, "content": "Done!"}]
    r = await chat_client(s).chat.completions.create(model=MODEL, messages=back, tools=[CHAT_TOOL])
    assert r.choices[0].message.content == "Patched."
    assert "Done!" in prompts[2].prompt_text and "Begin Patch" in prompts[2].prompt_text


ADD = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


@pytest.mark.parametrize("text,ok", [
    ("Sure, patching now.", True),
    ("Sure." + "<tool_call>\n" + json.dumps({"name": "apply_patch", "arguments": {"input": PATCH}},
                                            ensure_ascii=False) + "\n</tool_call>", True),
    ("<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": 2}}) + "\n</tool_call>",
     True),
    ("<tool_call>\n" + json.dumps({"name": "loose", "arguments": {"anything": [1]}})
     + "\n</tool_call>", True),
    ("Sure." + "<tool_call>\n" + json.dumps({"name": "apply_patch", "arguments": {"input": "*** Frob\n"}})
     + "\n</tool_call>", False),
    ("<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": "two"}}) + "\n</tool_call>",
     False),
])
def test_under_auto_an_opened_call_is_held_to_its_grammar(demo_backend, text, ok):
    """tool_choice auto: text is free, but a call the model opens must match the tool's grammar (a custom
    tool's input grammar, a strict function's schema); a function that is not strict takes any object."""
    from tinytitan import custom_tools
    from tinytitan.chat_request import Tool
    from tinytitan.engine.structured.tool_calls import auto_call_grammar

    tools = [custom_tools.parse(CODEX_TOOL, "tools[0]"), Tool("add", parameters=ADD, strict=True),
             Tool("loose", parameters=ADD)]
    vocab = demo_backend.tokenizer.get_vocab()
    grammar = auto_call_grammar(demo_backend.family, tools, True, vocab, start_in_reasoning=False)
    compiled = compile_grammar(grammar, demo_backend.tokenizer, demo_backend.vocab_size)
    tokens: list[int] = []
    for piece in text.replace("<tool_call>", "\0<tool_call>\0").replace("</tool_call>", "\0</tool_call>\0").split("\0"):
        tokens += [vocab[piece]] if piece in ("<tool_call>", "</tool_call>") else compiled.tokenizer.tokenize_str(piece)
    matcher = compiled.matcher()
    assert (matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()) is ok, matcher.get_error()[:300]


async def test_under_auto_the_mask_is_on_and_text_is_free(serve, demo_backend):
    s = await serve(backend=demo_backend)
    prompts = record_prompts(s)
    r = await client(s).responses.create(model=demo_backend.model_id, input="hi", tools=[CODEX_TOOL], store=False,
                                         max_output_tokens=30, temperature=1, extra_body={"seed": 3})
    assert prompts[0].grammar is not None  # the call grammar masks the whole answer
    assert r.status in ("completed", "incomplete")
