"""A user message may stand between a function call and its result (the Responses API takes
``[call, user message, function_call_output]``). Neither ``truncation: "auto"`` nor server-side compaction
(``context_management``) may part the call from its result there: truncation never keeps a result without its
call, and compaction never summarises a call whose result it keeps (the request was refused, 400 "No tool
call found", or its stream failed)."""

from __future__ import annotations

import httpx
import pytest

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
TOOLS = [{"type": "function", "name": "f"}]
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
RESULT = {"type": "function_call_output", "call_id": "c1", "output": "RESULT-OF-F"}
HURRY = {"role": "user", "content": "also, hurry"}


async def test_truncation_never_keeps_a_result_without_its_call(serve, demo_tok):
    """The turn holding the call goes with its result's: where the old turn's going makes room, both stay; where
    the call's turn itself does not fit, the request is refused rather than answered with a result of no call."""
    old = [{"role": "user", "content": "an old question " * 40}, {"role": "assistant", "content": "OLD-ANSWER"}]
    recent = [{"role": "user", "content": "run f"}, CALL, HURRY, RESULT]
    probe = await serve(["x"])
    async with httpx.AsyncClient(timeout=30) as c:
        needed = (await c.post(probe.url("/v1/responses/input_tokens"), json={
            "model": MODEL, "input": recent, "tools": TOOLS})).json()["input_tokens"]
        backend = Recording([ScriptEntry("Done.")], demo_tok, model_id=MODEL, context_window=needed + 8)
        s = await serve(backend=backend)
        kept = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": old + recent, "tools": TOOLS,
                                                          "truncation": "auto"})
        tight = Recording([ScriptEntry("Done.")], demo_tok, model_id=MODEL, context_window=needed - 8)
        t = await serve(backend=tight)
        refused = await c.post(t.url("/v1/responses"), json={"model": MODEL, "input": old + recent, "tools": TOOLS,
                                                             "truncation": "auto"})
    assert kept.status_code == 200, kept.text
    prompt = backend.prompts[-1]
    assert "OLD-ANSWER" not in prompt and '"name": "f"' in prompt and "RESULT-OF-F" in prompt, prompt
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded", refused.text
    assert not tight.prompts  # (never a prompt holding the result without its call)


@pytest.mark.parametrize("stream", [False, True])
async def test_compaction_never_summarises_a_call_whose_result_it_keeps(serve, demo_tok, stream):
    backend = Recording([ScriptEntry("SUMMARY"), ScriptEntry("Done.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    items = [{"role": "user", "content": "an old question " * 10}, {"role": "assistant", "content": "OLD-ANSWER"},
             {"role": "user", "content": "run f"}, CALL, HURRY, RESULT]
    body = {"model": MODEL, "input": items, "tools": TOOLS, "store": False,
            "context_management": [{"type": "compaction", "compact_threshold": 10}]}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json={**body, "stream": stream})
    assert r.status_code == 200, r.text
    assert "response.failed" not in r.text and '"status": "failed"' not in r.text, r.text
    summary_prompt, reply_prompt = backend.prompts
    assert "OLD-ANSWER" in summary_prompt and "RESULT-OF-F" not in summary_prompt
    assert '"name": "f"' in reply_prompt and "RESULT-OF-F" in reply_prompt and "OLD-ANSWER" not in reply_prompt
