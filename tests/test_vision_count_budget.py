"""Counting a request's tokens processes its images, held past the processed-image budget while the request is
rendered (vision.py): a count is never read, so the budget applies again once it is counted."""

from __future__ import annotations

import base64

import httpx

from anthropic_util import HEADERS
from test_vision import png, vision  # noqa: F401 (the module's fixture)
from tinytitan.engine.backends.vision import KEPT_IMAGE_BYTES


async def test_counting_many_images_leaves_the_budget_as_it_was(serve, vision):  # noqa: F811
    server = await serve(backend=vision)
    content = []
    for i in range(70):
        data = base64.b64encode(png((i, 255 - i, (7 * i) % 256))).decode()
        content += [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                    {"type": "text", "text": f"Image {i}."}]
    async with httpx.AsyncClient(timeout=600) as c:
        r = await c.post(server.url("/v1/messages/count_tokens"), headers=HEADERS, json={
            "model": "demo-vision", "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    assert r.json()["input_tokens"] > 70 * 256
    kept = sum(p.nbytes for p in vision._processed.values())
    assert kept <= KEPT_IMAGE_BYTES, f"{kept >> 20} MiB of processed images kept after a count"
