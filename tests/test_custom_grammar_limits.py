"""A custom tool's grammar llguidance cannot follow to the end (its item limit: ``.*a`` written inside the call's
JSON string makes every character a choice point) fails the turn with a message a client can act on, not
kilobytes of the compiled grammar."""

from __future__ import annotations

import httpx

import strict


async def test_a_grammar_past_the_matchers_item_limit_says_what_to_change(serve, demo_backend):
    s = await serve(backend=demo_backend, strict_tools_echo=False)
    body = {"model": "tinytitan-demo", "input": "hi", "max_output_tokens": 60,
            "tools": [{"type": "custom", "name": "t", "format": {"type": "grammar", "syntax": "regex",
                                                                  "definition": "(.*a){3}"}}],
            "tool_choice": {"type": "custom", "name": "t"}}
    async with httpx.AsyncClient(timeout=120) as c:
        r = await c.post(s.url("/v1/responses"), json=body)
    doc = strict.response(r.content)
    assert doc.status == "failed", doc.status
    assert "too ambiguous" in doc.error.message and len(doc.error.message) < 600, doc.error.message[:800]
    assert "%llguidance" not in doc.error.message and "lark" not in doc.error.message.lower()


def test_the_first_line_of_any_other_matcher_error_is_kept():
    from tinytitan.engine.structured.processor import failure_message

    assert failure_message(7, "parser error: token not allowed\n%llguidance {}\nstart: ...") == \
        "the output grammar's matcher failed (token 7): parser error: token not allowed"
    assert "too ambiguous" in failure_message(83, "parser error: Too many items (limit 50000; mask); try avoiding")
