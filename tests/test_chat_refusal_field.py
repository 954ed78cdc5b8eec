"""An assistant turn that carries the model's refusal in its ``refusal`` field (as the API returns a declined
answer: ``content`` null, ``refusal`` the text; a client appends that message to its history) keeps that text,
as a ``refusal`` content part does — never an empty turn."""

from __future__ import annotations

import json

import httpx

MODEL = "tinytitan-scripted"
REFUSAL = "I can't help with that."


async def prompt_of(s, messages) -> str:
    proto = s.server.protocols["openai_chat"]
    req = proto.chat_request(proto.validate(json.dumps({"model": MODEL, "messages": messages}).encode()))
    return (await s.engine.prepare(req)).prompt_text


async def test_the_refusal_field_is_the_assistant_turns_text(serve):
    s = await serve(["ok"])
    field = await prompt_of(s, [{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": None, "refusal": REFUSAL},
                                {"role": "user", "content": "why not?"}])
    part = await prompt_of(s, [{"role": "user", "content": "hi"},
                               {"role": "assistant", "content": [{"type": "refusal", "refusal": REFUSAL}]},
                               {"role": "user", "content": "why not?"}])
    assert REFUSAL in field
    assert field == part


async def test_a_refusal_that_is_not_a_string_is_a_400_naming_it(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={"model": MODEL, "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "refusal": 5},
            {"role": "user", "content": "?"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].refusal", r.text
