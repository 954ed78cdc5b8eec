"""A served id that itself ends in ':latest' (``--model-id tiny:latest``) is still served by that name, as
/v1/models lists it: reading ':latest' as the bare id must not hide the id itself."""

from __future__ import annotations

import httpx

USER = [{"role": "user", "content": "hi"}]


async def test_a_model_id_ending_in_latest_is_still_served_by_its_own_name(serve):
    s = await serve(["a"] * 8, model_id="tiny:latest")
    async with httpx.AsyncClient(timeout=30) as c:
        listed = (await c.get(s.url("/v1/models"))).json()["data"][0]["id"]
        chat = await c.post(s.url("/v1/chat/completions"), json={"model": listed, "messages": USER})
        fast = await c.post(s.url("/v1/chat/completions"), json={"model": "tiny:latest-fast", "messages": USER})
    assert listed == "tiny:latest"
    assert chat.status_code == 200, chat.text
    assert fast.status_code == 200, fast.text
