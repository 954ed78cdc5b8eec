"""A request of more than 64 images (the cap is 100, Anthropic's) on a vision model: every image is read, none
crashes the server, and each goes through the model's image processor once.

The vision tower once took all of a prompt's images in one batch, whose attention array passed 2**31 elements at
65 images of the demo vision model (9 of a real Gemma 3): mlx's CPU kernel crashed the process. And the processed
images kept for later turns (256 MiB: about 26 of the demo model's) evicted the request's own, so each of 70 went
through the processor four times (rendering, tokenizing, placing, reading): 280 runs, 4-7 s.

The request answered here holds the fewest images that would crash that batch: each image costs the vision tower
about a second on a CPU (its softmax over 4096 patches squared), so every image past the bound is a second of the
suite. The count, which reads none through the tower, holds a few more than the budget keeps."""

from __future__ import annotations

import base64

import httpx

import strict
from anthropic_util import HEADERS
from vision_helpers import png, vision  # noqa: F401 (the module's fixture)
from tinytitan.engine.backends.vision import KEPT_IMAGE_BYTES


IMAGES = 65  # 65 × 2 heads × 4096² patches passes 2**31 (64 is 2**31 exactly); more than the ~26 the budget keeps
PAST_BUDGET = 30  # a count crosses the budget with fewer (27 of the demo model's 9.6 MB images fit 256 MiB)


def many_images(shade: int = 0, count: int = IMAGES) -> list[dict]:
    content = []
    for i in range(count):
        data = base64.b64encode(png((i, 255 - i, (7 * i + shade) % 256))).decode()
        content += [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                    {"type": "text", "text": f"Image {i}."}]
    return content


async def test_a_request_of_65_images_is_answered(serve, vision):  # noqa: F811
    server = await serve(backend=vision)
    content = many_images()
    before, processed = vision.encoded_images, vision.processed_images
    async with httpx.AsyncClient(timeout=600) as c:
        r = await c.post(server.url("/v1/messages"), headers=HEADERS, json={
            "model": "demo-vision", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    assert strict.message(r.json()).usage.input_tokens > IMAGES * 256
    assert vision.encoded_images == before + IMAGES
    assert vision.processed_images == processed + IMAGES


async def test_counting_many_images_leaves_the_budget_as_it_was(serve, vision):  # noqa: F811
    """Counting a request's tokens processes its images, held past the processed-image budget while the request is
    rendered (vision.py): a count is never read, so the budget applies again once it is counted. A count reads no
    image through the tower, but each image it processes is time: it holds a few more than the budget keeps."""
    server = await serve(backend=vision)
    async with httpx.AsyncClient(timeout=600) as c:
        r = await c.post(server.url("/v1/messages/count_tokens"), headers=HEADERS, json={
            "model": "demo-vision", "messages": [{"role": "user", "content": many_images(3, PAST_BUDGET)}]})
    assert r.status_code == 200, r.text
    assert r.json()["input_tokens"] > PAST_BUDGET * 256
    kept = sum(p.nbytes for p in vision._processed.values())
    assert kept <= KEPT_IMAGE_BYTES, f"{kept >> 20} MiB of processed images kept after a count"
