"""Chat Completions: tool results sent in another order than their calls (a client that appends each as its
call finishes) reach the template in the calls' order, as the API pairs them by id and the template pairs them
by position."""

from __future__ import annotations

import strict
from backends import Recording
from chat_helpers import MODEL, TOOLS, USER, client
from tinytitan.engine.backends.scripted import ScriptEntry


def call(call_id: str, city: str) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}


def result(call_id: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


async def test_results_reach_the_template_in_the_order_of_their_calls(serve, demo_tok):
    s = await serve(backend=Recording([ScriptEntry("Both sunny.")] * 2, demo_tok, model_id=MODEL))
    turn = {"role": "assistant", "content": None,
            "tool_calls": [call("call_a", "Paris"), call("call_b", "Rome"), call("call_c", "Oslo")]}
    in_order = USER + [turn, result("call_a", "Paris: 20C"), result("call_b", "Rome: 25C"),
                       result("call_c", "Oslo: 5C")]
    finished = USER + [turn, result("call_c", "Oslo: 5C"), result("call_a", "Paris: 20C"),
                       result("call_b", "Rome: 25C")]
    c = client(s)
    for messages in (in_order, finished):
        r = await c.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        assert strict.chat_completion(r.model_dump()).choices[0].message.content == "Both sunny."
    first, second = s.engine.backend.prompts
    assert second == first
    assert first.index("Paris: 20C") < first.index("Rome: 25C") < first.index("Oslo: 5C")
