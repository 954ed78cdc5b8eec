"""An integer option written as a float (``"num_predict": 4.0``: JSON has one number type, and a client that
computes a setting, or a JavaScript one, may send it so) is that integer, as Ollama reads it (``Options.FromMap``
sets an int field from a float64) and as this server reads a top-level integer field: JSON Schema counts 4.0 an
integer, and the value must reach the request as one, not as a float the engine counts and slices by."""

from __future__ import annotations

import json

import httpx

from backends import Asked
from tinytitan.engine.backends.scripted import ScriptEntry
from tinytitan.engine.cache.memory import PromptCache

MODEL = "tinytitan-scripted"


async def test_an_integer_option_sent_as_a_float_is_that_integer(serve, demo_tok):
    # the prompt cache `tinytitan serve --script` keeps: its bookkeeping cut the answer at max_tokens (a 500 then)
    backend = Asked([ScriptEntry("one two three four five six seven eight")], demo_tok, model_id=MODEL,
                    prompt_cache=PromptCache(1 << 20))
    s = await serve(backend=backend)
    options = {"num_predict": 4.0, "seed": 7.0, "top_k": 40.0, "repeat_last_n": 8.0}
    async with httpx.AsyncClient(timeout=30) as h:
        for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/api/generate", {"prompt": "hi"})):
            for stream in (False, True):
                r = await h.post(s.url(path), json={"model": MODEL, "stream": stream, "options": options, **body})
                assert r.status_code == 200, r.text
                last = json.loads(r.text.splitlines()[-1])  # the body, or the stream's last line
                assert (last["done_reason"], last["eval_count"]) == ("length", 4), r.text
                req = backend.requests[-1]
                assert (req.max_tokens, req.seed, req.top_k, req.repeat_last_n) == (4, 7, 40, 8)
                assert all(type(v) is int for v in (req.max_tokens, req.seed, req.top_k, req.repeat_last_n))
