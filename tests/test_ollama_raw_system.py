"""/api/generate: a system prompt with a raw prompt is refused, as Ollama refuses it."""

from __future__ import annotations

import httpx

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"


async def test_raw_with_a_system_prompt_is_refused_as_ollama_refuses_it(serve, demo_tok):
    """Ollama: ``raw mode does not support template, system, or context`` (400). The system text was dropped
    silently: the model read the raw prompt alone and the client never knew."""
    backend = Recording([ScriptEntry("x")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/generate"), json={"model": MODEL, "prompt": "<|im_start|>user\nhi<|im_end|>\n",
                                                       "raw": True, "system": "Answer in French.", "stream": False})
        assert r.status_code == 400, (r.text, backend.prompts)
        assert "'system'" in r.json()["error"] and "raw" in r.json()["error"]
        # an empty one is none (Go clients send every string field)
        r = await h.post(s.url("/api/generate"), json={"model": MODEL, "prompt": "p", "raw": True, "system": "",
                                                       "stream": False})
        assert r.status_code == 200 and backend.prompts == ["p"]
