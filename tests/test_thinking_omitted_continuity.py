"""Messages ``thinking.display: "omitted"``: the API redacts the thought "but a signature is returned for multi-turn
continuity" — the block sent back as it came must give the next turn the same prompt as a shown one."""
from __future__ import annotations

import httpx

from anthropic_util import HEADERS
from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

TOOL = {"name": "get_weather", "description": "W", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
CALL = '<think>\nI should look up Rome.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


async def _loop(c, s, display):
    thinking = {"type": "enabled", "budget_tokens": 2000, **({"display": display} if display else {})}
    body = {"model": "m", "max_tokens": 4000, "tools": [TOOL], "thinking": thinking,
            "messages": [{"role": "user", "content": "Weather in Rome?"}]}
    first = (await c.post(s.url("/v1/messages"), json=body, headers=HEADERS)).json()
    use = next(b for b in first["content"] if b["type"] == "tool_use")
    body["messages"] += [{"role": "assistant", "content": first["content"]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "sunny"}]}]
    r = await c.post(s.url("/v1/messages"), json=body, headers=HEADERS)
    assert r.status_code == 200, r.text


async def test_an_omitted_thought_sent_back_reaches_the_next_turn(serve, demo_tok):
    b = Recording([ScriptEntry(CALL), ScriptEntry("Sunny."), ScriptEntry(CALL), ScriptEntry("Sunny.")], demo_tok, model_id="m")
    s = await serve(backend=b, model_id="m")
    async with httpx.AsyncClient(timeout=30) as c:
        await _loop(c, s, None)
        await _loop(c, s, "omitted")
    shown, omitted = b.prompts[1], b.prompts[3]
    assert "I should look up Rome." in shown
    assert omitted == shown, omitted


async def test_the_streamed_signature_carries_an_omitted_thought(serve, demo_tok):
    import json
    s = await serve(script=[CALL, CALL], model_id="m")
    async with httpx.AsyncClient(timeout=30) as c:
        sigs = {}
        for display in ("summarized", "omitted"):
            body = {"model": "m", "max_tokens": 4000, "tools": [TOOL], "stream": True,
                    "thinking": {"type": "enabled", "budget_tokens": 2000, "display": display},
                    "messages": [{"role": "user", "content": "Weather in Rome?"}]}
            r = await c.post(s.url("/v1/messages"), json=body, headers=HEADERS)
            events = [json.loads(l[6:]) for l in r.text.splitlines() if l.startswith("data: ")]
            deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
            sigs[display] = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
            assert (display == "omitted") == (not any(d["type"] == "thinking_delta" for d in deltas))
    from tinytitan.protocols.common import thought_of
    assert sigs["summarized"] == ["tinytitan-unsigned"]
    assert thought_of(sigs["omitted"][0]) == "I should look up Rome.\n"
