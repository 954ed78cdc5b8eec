"""A served id that itself ends in ':latest' (``--model-id tiny:latest``) is served by Ollama's API under the name
/api/tags lists it by, as /v1 serves it: stripping ':latest' must not hide the id itself."""

from __future__ import annotations

import httpx


async def test_an_id_ending_in_latest_is_served_by_ollamas_api_too(serve):
    s = await serve(["a"] * 8, model_id="tiny:latest")
    async with httpx.AsyncClient(timeout=30) as c:
        listed = (await c.get(s.url("/api/tags"))).json()["models"][0]["name"]
        chat = await c.post(s.url("/api/chat"), json={"model": listed, "stream": False,
                                                      "messages": [{"role": "user", "content": "hi"}]})
        show = await c.post(s.url("/api/show"), json={"model": listed})
    assert listed == "tiny:latest"
    assert chat.status_code == 200, chat.text
    assert show.status_code == 200, show.text
