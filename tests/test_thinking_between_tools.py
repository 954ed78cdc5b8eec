"""Messages ``thinking: {"type": "between_tools"}`` is thinking turned off (the API's words: "thinking turned off,
and any short progress updates the model writes between tool calls come back as thinking blocks"), so it renders
the prompt ``disabled`` does, whatever the server's default."""

from __future__ import annotations

import httpx

from anthropic_util import HEADERS
from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry


async def test_between_tools_turns_thinking_off(serve, demo_tok):
    b = Recording([ScriptEntry("ok")] * 3, demo_tok, model_id="m")
    s = await serve(backend=b, model_id="m")
    async with httpx.AsyncClient(timeout=30) as c:
        for kind in ("disabled", "between_tools", "adaptive"):
            r = await c.post(s.url("/v1/messages"), headers=HEADERS, json={
                "model": "m", "max_tokens": 50, "thinking": {"type": kind},
                "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
    disabled, between, adaptive = b.prompts
    assert disabled.endswith("<think>\n\n</think>\n\n") and not adaptive.endswith("</think>\n\n")
    assert between == disabled
