"""A Messages refusal of one image or document block names that block's place in the API's own spelling
(``messages.0.content.1.image``, ``messages.2.content.0.tool_result.content.1.document``): Claude Code reads it
to replace exactly that block and retry. A place it cannot read (``messages[0].content[1]``) makes it fall back
to dropping every base64 block of that kind in the latest message that holds one: images the user still needs."""

from __future__ import annotations

import re

import pytest

from anthropic_util import MODEL, assert_envelope, body, post
from image_helpers import CLAUDE_CODE_PLACE
from image_helpers import BMP, PNG, Seeing, b64, encoded, image_host, seeing  # noqa: F401  (fixtures)
from vision_helpers import RED, ask, part, vision  # noqa: F401  (the demo-vision backend fixture)
from tinytitan import images
from tinytitan.engine.backends.scripted import ScriptEntry

# how Claude Code words the note that stands for the block it drops: the message after the place
NOTE = re.compile(r".*messages[.[]\d+[\].]+content[.[]\d+[\].]+\S*:?\s*")
SHOT = {"name": "shot", "input_schema": {"type": "object"}}


def image(source: dict) -> dict:
    return {"type": "image", "source": source}


def base64_image(data: bytes, media_type: str = "image/png") -> dict:
    return image({"type": "base64", "media_type": media_type, "data": b64(data)})


def in_turn(block: dict) -> tuple[list[dict], tuple]:
    """The block second in a user turn, after a picture Claude Code must keep → (messages, its indices)."""
    return [{"role": "user", "content": [base64_image(PNG), block]}], ("0", "1", None)


def in_result(block: dict) -> tuple[list[dict], tuple]:
    """The block second in a tool result's content, after a picture that must stay → (messages, its indices)."""
    return [{"role": "user", "content": "shoot"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                base64_image(PNG), block]}]}], ("2", "0", "1")


def assert_placed(d: dict, found: tuple, kind: str, words: str) -> None:
    message = d["error"]["message"]
    match = CLAUDE_CODE_PLACE.search(message)
    assert match is not None and match.groups() == (*found, kind), message
    assert words in NOTE.sub("", message, count=1), message  # what Claude Code's note says of it


PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
SPEC_REFUSALS = [  # (the block, the kind Claude Code reads, the words after the place, the start of the message)
    (image({"type": "file", "file_id": "file_1"}), "image", "file sources are not supported",
     "Could not process image: "),
    (image({"type": "bytes", "data": "x"}), "image", "image source type 'bytes' is not supported",
     "Could not process image: "),
    (PDF, "document", "this model does not support PDF input", "Could not process PDF: "),
    ({"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}, "document",
     "this model does not support PDF input", "Could not process PDF: "),
    ({"type": "document", "source": {"type": "file", "file_id": "file_1"}}, "document",
     "file sources are not supported", "Could not process document: "),
    ({"type": "document", "source": {"type": "html", "data": "<p>"}}, "document",
     "document source type 'html' is not supported", "Could not process document: "),
]


@pytest.mark.parametrize("place", [in_turn, in_result], ids=["turn", "tool_result"])
@pytest.mark.parametrize("block, kind, words, start", SPEC_REFUSALS,
                         ids=["image-file", "image-bytes", "pdf", "pdf-url", "document-file", "document-html"])
async def test_a_refused_media_block_is_named_in_the_apis_spelling(serve, place, block, kind, words, start):
    s = await serve(["never"])
    messages, found = place(block)
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages), path), 400, "invalid_request_error")
        assert d["error"]["message"].startswith(start), d
        assert_placed(d, found, kind, words)
    tagged = "messages.2.content.0.tool_result.content.1" if found[0] == "2" else "messages.0.content.1"
    assert f"{tagged}.{block['type']}.source.type: " in d["error"]["message"]


IMAGE_REFUSALS = [  # (the block, the words after its place)
    (base64_image(b"this is not an image"), "the data is not a valid image"),
    (base64_image(BMP), "image format BMP is not supported"),
    (base64_image(encoded("PNG", (2, images.MAX_SIDE + 1))), "image dimensions exceed"),
    (base64_image(PNG[:60]), "the image is damaged or truncated"),
    (image({"type": "base64", "media_type": "image/png", "data": "not base64!"}), "not valid base64"),
    (image({"type": "base64", "media_type": "image/png", "data": ""}), "image cannot be empty"),
    (image({"type": "url", "url": "https://example.com/cat.png"}), "remote image URLs are not fetched"),
    (image({"type": "url", "url": "ftp://example.com/cat.png"}), "image URL scheme 'ftp' is not supported"),
]


@pytest.mark.parametrize("place", [in_turn, in_result], ids=["turn", "tool_result"])
@pytest.mark.parametrize("block, words", IMAGE_REFUSALS,
                         ids=["not-an-image", "bmp", "dimensions", "truncated", "base64", "empty", "remote", "ftp"])
async def test_a_refused_image_is_named_in_the_apis_spelling(seeing, place, block, words):
    s, backend = seeing
    messages, found = place(block)
    d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages)), 400, "invalid_request_error")
    assert d["error"]["message"].startswith("Could not process image: "), d
    assert_placed(d, found, "image", words)
    assert backend.requests == []


async def test_an_image_over_the_byte_limit_is_named(seeing, monkeypatch):
    s, _ = seeing
    monkeypatch.setattr(images, "MAX_BYTES", len(PNG) - 1)
    for place in (in_turn, in_result):
        messages, found = place(base64_image(PNG))
        d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages)), 400, "invalid_request_error")
        # (the first image, at content 0, is the one over it now)
        assert_placed(d, (found[0], "0", None) if found[2] is None else (*found[:2], "0"), "image",
                      f"image exceeds {len(PNG) - 1} bytes maximum")


async def test_the_image_past_the_cap_is_named(seeing, monkeypatch):
    s, _ = seeing
    monkeypatch.setattr(images, "MAX_IMAGES", 1)
    for place in (in_turn, in_result):
        messages, found = place(base64_image(PNG))
        d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages)), 400, "invalid_request_error")
        assert_placed(d, found, "image", "too many images in one request: 2 > 1")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_model_names_the_first_image(serve, stream):
    s = await serve(["never"], model_id="text-only")
    for place in (in_turn, in_result):
        messages, found = place({"type": "text", "text": "and this"})
        r = await post(s, body(model="text-only", stream=stream, tools=[SHOT], messages=messages))
        d = assert_envelope(r, 400, "invalid_request_error")
        assert d["error"]["message"].startswith("Could not process image: "), d
        first = (found[0], "0", None) if found[2] is None else (*found[:2], "0")
        assert_placed(d, first, "image", "the model 'text-only' reads text only")


async def test_a_fetch_that_fails_is_named(serve, demo_tok, image_host):  # noqa: F811  (fixture)
    s = await serve(backend=Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL), fetch_images=True)
    for place in (in_turn, in_result):
        messages, found = place(image({"type": "url", "url": image_host + "/missing"}))
        d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages)), 400, "invalid_request_error")
        assert d["error"]["message"].startswith("Could not process image: "), d
        assert_placed(d, found, "image", "could not fetch the image at")



def test_an_image_the_models_template_leaves_out_is_named(vision, monkeypatch):  # noqa: F811  (fixture)
    """A vision model whose chat template writes no place for an image (a turn it renders as text only) refuses
    it naming that image, as every other image error does."""
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.errors import ApiError
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    monkeypatch.setattr(MLXBackend, "render", lambda self, req: "a template that writes no image")
    req = ask(part(RED, "messages[2].content[0].content[1]"), "and this?")
    with pytest.raises(ApiError) as err:
        vision.prepare(req)
    _, d = AnthropicMessages().error_response(err.value)
    assert d["error"]["message"].startswith("Could not process image: "), d
    assert_placed(d, ("2", "0", "1"), "image", "The model's chat template placed 0 image(s) of the 1 sent")


SHAPE_ERRORS = [  # (the block, the API's words after the block's place: pydantic's, as the real API's errors say them)
    (base64_image(PNG, "image/bmp"),
     "image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"),
    (image({"type": "base64", "media_type": "image/png"}), "image.source.base64.data: Field required"),
    (image({"type": "url"}), "image.source.url.url: Field required"),
    ({"type": "image"}, "image.source: Field required"),
    ({"type": "document"}, "document.source: Field required"),
    ({"type": "document", "source": {"type": "text", "data": "x"}}, "document.source.text.media_type: Field required"),
]


@pytest.mark.parametrize("place", [in_turn, in_result], ids=["turn", "tool_result"])
@pytest.mark.parametrize("block, words", SHAPE_ERRORS,
                         ids=["media-type", "no-data", "no-url", "no-source", "document-no-source",
                              "text-no-media-type"])
async def test_a_malformed_media_block_is_worded_as_the_api_words_it(serve, place, block, words):
    s = await serve(["never"])
    messages, found = place(block)
    tagged = "messages.2.content.0.tool_result.content.1" if found[0] == "2" else "messages.0.content.1"
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        d = assert_envelope(await post(s, body(tools=[SHOT], messages=messages), path), 400, "invalid_request_error")
        assert d["error"]["message"] == f"{tagged}.{words}", d
        assert CLAUDE_CODE_PLACE.search(d["error"]["message"]).groups() == (*found, block["type"]), d


def test_an_image_errors_place_is_spelled_as_the_validator_spells_it():
    """An image error raised after validation names its image by the place alone (anthropic_request.api_place);
    the validator spells a place from the body and the spec's ``tagged`` table (speclang.paths.loc): the two
    agree for every place an image may stand."""
    from tinytitan.protocols.anthropic_messages import AnthropicMessages
    from tinytitan.protocols.anthropic_request import api_place
    from tinytitan.speclang import paths

    picture = base64_image(PNG)
    document = {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "a"}, picture]}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [picture, document]}
    doc = {"messages": [{"role": "user", "content": [picture, document]}, {"role": "user", "content": [result]}]}
    tagged = AnthropicMessages().spec.request["tagged"]
    for where in ("messages[0].content[0]", "messages[0].content[1].source.content[1]",
                  "messages[1].content[0].content[0]", "messages[1].content[0].content[1].source.content[1]"):
        assert f"{api_place(where)}.image" == paths.loc(doc, tuple(paths.steps(where)), tagged), where
