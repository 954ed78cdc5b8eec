"""Malformed tool calls in a model's output, each a minimal reproduction of a bug the output fuzz found
(tests/test_fuzz_outputs.py): the fuzz's invariants hold of it, and what each protocol makes of the call.
Arguments a model writes as invalid JSON (or JSON that is not an object) are passed through as written on the
OpenAI protocols (as OpenAI's own API may: clients validate them and tell the model) and become ``{}`` on
Messages; the fragments that make them are kept out of the fuzz's random cases (``PASSED_THROUGH``)."""

from __future__ import annotations

import httpx
import pytest

from output_fuzz_cases import Case, ask
from output_fuzz_invariants import run_cases
from output_fuzz_readers import chat_nonstream, chat_stream, messages_nonstream, messages_stream, responses_items


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
