"""A legacy completion whose prompt is over the context window is refused in OpenAI's words, as chat and
Responses are: litellm (and the clients that match the same text) recognise an overflow only on
"This model's maximum context length is" (and then compact or fall back to a larger model)."""

from __future__ import annotations

import httpx

import strict
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry


async def test_a_prompt_over_the_window_is_refused_in_openais_words(serve, demo_tok):
    s = await serve(backend=ScriptedBackend([ScriptEntry("never")], demo_tok, context_window=64))
    async with httpx.AsyncClient(timeout=30) as c:
        for stream in (False, True):
            r = await c.post(s.url("/v1/completions"), json={"model": "tinytitan-scripted", "stream": stream,
                                                               "prompt": " ".join(["word"] * 200)})
            assert r.status_code == 400
            err = strict.openai_error(r.content)
            assert err.code == "context_length_exceeded" and err.param == "prompt"
            assert err.message.startswith("This model's maximum context length is 64 tokens."), err.message
            assert "200 tokens" in err.message
