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
    backend = Recording([ScriptEntry("Done.")], demo_tok, model_id=MODEL, context_window=240)
    s = await serve(backend=backend)
    items = [{"role": "user", "content": "run f " * 60}, CALL, HURRY, RESULT]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": items, "tools": TOOLS,
                                                       "truncation": "auto"})
    if r.status_code == 400:  # the call's turn is kept whole: it does not fit
        assert r.json()["error"]["code"] == "context_length_exceeded", r.text
        return
    assert r.status_code == 200, r.text
    prompt = backend.prompts[-1]
    assert "RESULT-OF-F" not in prompt or '"name": "f"' in prompt.split("<|im_start|>user", 1)[1], prompt


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
