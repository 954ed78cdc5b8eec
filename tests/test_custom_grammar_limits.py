"""A custom tool's grammar llguidance cannot follow to the end fails the turn with a message a client can act
on, not kilobytes of the compiled grammar. A pattern that can end at almost any character (``(.*a){3}``) is
one lexeme where it can be (test_grammar_lexemes.py); followed by a terminal that begins with an escaped
character (``LF``), it is written character by character, and every character is a choice point for the
matcher's item limit."""

from __future__ import annotations

import re

import httpx

import strict


async def test_a_grammar_past_the_matchers_item_limit_says_what_to_change(serve, demo_backend):
    s = await serve(backend=demo_backend, strict_tools_echo=False)
    body = {"model": "tinytitan-demo", "input": "hi", "max_output_tokens": 60,
            "tools": [{"type": "custom", "name": "t", "format": {
                "type": "grammar", "syntax": "lark", "definition": "start: /(.*a){3}/ LF\n%import common.LF"}}],
            "tool_choice": {"type": "custom", "name": "t"}}
    async with httpx.AsyncClient(timeout=120) as c:
        r = await c.post(s.url("/v1/responses"), json=body)
    doc = strict.response(r.content)
    assert doc.status == "failed", doc.status
    assert "too ambiguous" in doc.error.message and len(doc.error.message) < 600, doc.error.message[:800]
    assert "%llguidance" not in doc.error.message and "lark" not in doc.error.message.lower()


async def test_the_same_pattern_alone_is_followed_to_the_end(serve, demo_backend):
    s = await serve(backend=demo_backend, strict_tools_echo=False)
    body = {"model": "tinytitan-demo", "input": "hi", "max_output_tokens": 400,
            "tools": [{"type": "custom", "name": "t", "format": {"type": "grammar", "syntax": "regex",
                                                                  "definition": "(.*a){3}"}}],
            "tool_choice": {"type": "custom", "name": "t"}}
    async with httpx.AsyncClient(timeout=120) as c:
        r = await c.post(s.url("/v1/responses"), json=body)
    doc = strict.response(r.content)
    assert doc.status in ("completed", "incomplete"), (doc.status, doc.error)
    assert doc.usage.output_tokens > 60  # past where the item limit stopped the per-character form
    calls = [item for item in doc.output if item.type == "custom_tool_call"]
    if doc.status == "completed":
        assert len(calls) == 1 and re.fullmatch("(.*a){3}", calls[0].input), calls


def test_the_first_line_of_any_other_matcher_error_is_kept():
    from tinytitan.engine.structured.processor import failure_message

    assert failure_message(7, "parser error: token not allowed\n%llguidance {}\nstart: ...") == \
        "the output grammar's matcher failed (token 7): parser error: token not allowed"
    assert "too ambiguous" in failure_message(83, "parser error: Too many items (limit 50000; mask); try avoiding")
