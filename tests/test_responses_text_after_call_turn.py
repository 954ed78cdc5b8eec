"""A model that writes text after its tool call: Responses lists it as a message item after the function_call. Sent
back as the API returned it (as Codex and the SDKs do), with the call's output, the turn reads as the same
conversation on Chat Completions: one assistant turn holding the text and the call, then the call's result —
never a second assistant turn between the call and its output."""

from __future__ import annotations

import httpx

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
OUT = 'Before.\n<tool_call>\n{"name": "f", "arguments": {"x": "é"}}\n</tool_call>\nAfter.'
PARAMS = {"type": "object", "properties": {"x": {"type": "string"}}}
Q = {"role": "user", "content": "q"}


async def post(s, path: str, body: dict) -> dict:
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


async def test_text_after_a_call_stays_in_the_calling_turn(serve, demo_tok):
    backend = Recording([ScriptEntry(OUT)], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    tools = [{"type": "function", "function": {"name": "f", "parameters": PARAMS}}]
    answer = (await post(s, "/v1/chat/completions", {"tools": tools, "messages": [Q]}))["choices"][0]["message"]
    await post(s, "/v1/chat/completions", {"tools": tools, "messages": [
        Q, {k: v for k, v in answer.items() if v is not None},
        {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": "R"}]})
    chat = backend.prompts[-1]

    tools = [{"type": "function", "name": "f", "parameters": PARAMS}]
    output = (await post(s, "/v1/responses", {"tools": tools, "input": [Q]}))["output"]
    assert [i["type"] for i in output] == ["message", "function_call", "message"]  # text, call, text after it
    call = output[1]
    await post(s, "/v1/responses", {"tools": tools, "input": [
        Q, *output, {"type": "function_call_output", "call_id": call["call_id"], "output": "R"}]})
    responses = backend.prompts[-1]

    assert responses.count("<|im_start|>assistant") == chat.count("<|im_start|>assistant") == 2, responses
    assert responses == chat
