"""A model that will not load once a stream is open ends the stream in band with the error's own code, as the folded
answer names it (``model_load_failed``; ``group_broken`` for a group broken during the load), not the kind's default."""

from __future__ import annotations

import httpx

from catalog_helpers import USER, DamagedWeights, GroupDiesOnLoad
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry


def first_error(text: str) -> dict:
    import json

    return next(json.loads(line[6:])["error"] for line in text.splitlines()
                if line.startswith("data: {") and '"error"' in line)


async def test_a_streamed_load_failure_keeps_its_code(serve, demo_tok):
    good = ScriptedBackend([ScriptEntry("hello")], demo_tok, model_id="good")
    s = await serve(backend=[good, DamagedWeights([ScriptEntry("never")], demo_tok, model_id="damaged")])
    async with httpx.AsyncClient(timeout=30) as c:
        folded = await c.post(s.url("/v1/chat/completions"), json={"model": "damaged", "messages": USER})
        streamed = await c.post(s.url("/v1/chat/completions"), json={"model": "damaged", "stream": True,
                                                                      "messages": USER})
        other = await c.post(s.url("/v1/chat/completions"), json={"model": "good", "messages": USER})
    assert folded.status_code == 500 and folded.json()["error"]["code"] == "model_load_failed"
    assert first_error(streamed.text)["code"] == "model_load_failed", streamed.text
    assert other.status_code == 200  # the other model is served


async def test_a_group_broken_during_a_streamed_load_says_group_broken(serve, demo_tok):
    s = await serve(backend=GroupDiesOnLoad([ScriptEntry("never")], demo_tok))
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={"model": s.engine.model_id, "stream": True,
                                                               "messages": USER})
    assert first_error(r.text)["code"] == "group_broken", r.text
