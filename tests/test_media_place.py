"""A Messages refusal of one image or document block names that block's place in the API's own spelling
(``messages.0.content.1.image``, ``messages.2.content.0.tool_result.content.1.document``): Claude Code reads it
to replace exactly that block and retry. A place it cannot read (``messages[0].content[1]``) makes it fall back
to dropping every base64 block of that kind in the latest message that holds one: images the user still needs."""

from __future__ import annotations

import re

import pytest

from anthropic_util import assert_envelope, body, post
from test_image_media_type import CLAUDE_CODE_PLACE
from test_images import PNG, b64

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

