"""An Anthropic image whose base64 data is of another format than its declared ``media_type`` is refused, as the
API refuses it: in its words and its spelling of the place, which Claude Code reads to drop that one image."""

from __future__ import annotations

import base64
import io

import anthropic
import pytest
from PIL import Image

from anthropic_util import MODEL, assert_envelope, body, post, sdk
from tinytitan import images
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from image_helpers import CLAUDE_CODE_PLACE


def encoded(fmt: str) -> str:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 30, 30)).save(out, fmt)
    return base64.b64encode(out.getvalue()).decode()


PNG, JPEG = encoded("PNG"), encoded("JPEG")


class Seeing(ScriptedBackend):
    takes_images = True


@pytest.fixture
async def seeing(serve, demo_tok):
    return await serve(backend=Seeing([ScriptEntry("I see it.")] * 4, demo_tok, model_id=MODEL))


def image(data: str, media_type: str) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def turns(*blocks) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "look"}, *blocks]}]


def in_result(*blocks) -> list[dict]:
    return [{"role": "user", "content": "shoot"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "the screen"}, *blocks]}]}]


SHOT = {"name": "shot", "input_schema": {"type": "object"}}


@pytest.mark.parametrize("messages, place, found, declared, actual", [
    (turns(image(PNG, "image/jpeg")), "messages.0.content.1", ("0", "1", None), "image/jpeg", "image/png"),
    (in_result(image(JPEG, "image/png")), "messages.2.content.0.tool_result.content.1", ("2", "0", "1"),
     "image/png", "image/jpeg"),
], ids=["turn", "tool_result"])
async def test_an_image_of_another_format_than_declared_is_refused_naming_it(seeing, messages, place, found,
                                                                             declared, actual):
    s = seeing
    words = (f"{place}.image.source.base64.data: Image does not match the provided media type {declared} "
             f"(the data is {actual})")
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages), path), 400, "invalid_request_error",
                            words)
        assert CLAUDE_CODE_PLACE.search(d["error"]["message"]).groups() == (*found, "image")
    with pytest.raises(anthropic.BadRequestError):
        await sdk(s).messages.create(model=MODEL, max_tokens=8, tools=[SHOT], messages=messages)


async def test_an_image_of_its_declared_format_is_taken(seeing):
    m = await sdk(seeing).messages.create(model=MODEL, max_tokens=8, messages=turns(
        image(PNG, "image/png"), image(JPEG, "image/jpeg")))
    assert m.content[0].text == "I see it."


def test_the_check_reads_the_header_and_leaves_what_is_no_image_to_inspect():
    png = base64.b64decode(PNG)
    images.check_declared(images.part(png, "image/png", "x"))
    images.check_declared(images.part(base64.b64decode(JPEG), "image/jpg", "x"))  # image/jpg: a JPEG's other name
    images.check_declared(images.part(b"not an image", "image/png", "x"))
    with pytest.raises(images.ImageError) as err:
        images.check_declared(images.part(png, "image/webp", "x"), place="p")
    assert err.value.code == "image_media_type_mismatch"
    assert err.value.data == {"where": "x", "problem": "the image was declared image/webp, but its data is image/png",
                              "declared": "image/webp", "actual": "image/png", "place": "p"}


def test_the_header_is_opened_once_for_the_declared_format_and_the_limits(monkeypatch):
    """``check_declared`` gives back the part with what its header said: ``inspect`` reads that, not the bytes."""
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    sent = images.part(base64.b64decode(PNG), "image/png", "x")
    checked = images.check_declared(sent, place="p")
    assert checked == sent and checked.digest == sent.digest
    assert images.inspect(checked) == images.ImageInfo("PNG", "image/png", 8, 6) and len(opened) == 1
    damaged = images.check_declared(images.part(base64.b64decode(PNG)[:-20] + b"\0" * 20, "image/png", "y"))
    with pytest.raises(images.ImageError) as err:
        images.inspect(damaged)
    assert err.value.code == "invalid_image" and "damaged or truncated" in err.value.message and len(opened) == 2
