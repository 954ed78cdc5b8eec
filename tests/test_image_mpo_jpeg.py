"""A JPEG with the Multi-Picture extension (MPF: many phone and camera photos carry a depth map, gain map or preview
after the picture) is a JPEG to every API; Pillow opens it as format MPO, which was refused as an unsupported format
('image format MPO is not supported: send PNG, JPEG, GIF or WebP') — a photo attached or read by a tool was a 400."""

from __future__ import annotations

import io

from PIL import Image

from tinytitan import images

from image_helpers import MODEL, PNG, post_json, b64, seeing  # noqa: F401  (fixture)
from anthropic_util import HEADERS as ANTHROPIC_HEADERS


def mpo() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 0, 0)).save(out, "MPO", save_all=True,
                                                 append_images=[Image.new("RGB", (32, 24), (0, 200, 0))])
    return out.getvalue()


def test_a_multi_picture_jpeg_is_a_jpeg():
    part = images.part(mpo(), "image/jpeg", "messages[0].content[0]")
    info = images.inspect(part)
    assert (info.format, info.media_type, info.width, info.height) == ("JPEG", "image/jpeg", 64, 48)
    img = images.open_image(part)
    assert img.mode == "RGB" and img.size == (64, 48) and img.getpixel((5, 5))[0] > 150  # the first picture


async def test_a_photo_in_a_tool_result_is_taken(seeing):
    s, backend = seeing
    r = await post_json(s, "/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [
        {"role": "user", "content": "read photo.jpg"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(mpo())}}]}]}]},
        ANTHROPIC_HEADERS)
    assert r.status_code == 200, r.text
    assert [p.where for p in backend.requests[-1].images] == ["messages[2].content[0].content[0]"]
