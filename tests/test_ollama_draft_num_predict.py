"""``options.draft_num_predict``, the option Ollama's docs list for speculative decoding ("Set to 0 to disable
speculative drafting"; ``ollama run``'s ``/set parameter draft_num_predict 0`` sends it): taken, not refused
as an unknown option. 0 (or below: Ollama drafts only where it is above 0) decodes without drafts, as
``speculative: false`` does; above 0 the server's own drafting applies (drafts never change the answer)."""

from __future__ import annotations

import httpx

from backends import Asked
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"


async def test_draft_num_predict_is_taken_and_zero_turns_drafting_off(serve, demo_tok):
    backend = Asked([ScriptEntry("Hello.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    async with httpx.AsyncClient(timeout=30) as h:
        for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/api/generate", {"prompt": "hi"})):
            for drafts, speculative in ((0, False), (-1, False), (4, True), (None, True)):
                r = await h.post(s.url(path), json={"model": MODEL, "stream": False, **body,
                                                    "options": {"draft_num_predict": drafts, "num_predict": 8}})
                assert r.status_code == 200, (drafts, r.text)
                assert backend.requests[-1].speculative is speculative, (path, drafts)
            r = await h.post(s.url(path), json={"model": MODEL, "stream": False, **body,
                                                "options": {"draft_num_predict": "four"}})
            assert r.status_code == 400 and "options.draft_num_predict" in r.json()["error"], r.text
