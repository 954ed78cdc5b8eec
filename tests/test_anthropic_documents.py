"""Messages ``document`` blocks: a plain-text or custom-content document is read into the prompt as text (with its
title and context), in a user turn and inside a tool result, and counted the same way by count_tokens; what
cannot be read or produced here (PDF, url and file sources, citations) is refused by name."""

from __future__ import annotations

import anthropic
import pytest

from anthropic_util import MODEL, assert_envelope, body, chat_request, message, post, protocol, rendered, sdk
from image_helpers import CLAUDE_CODE_PLACE
from image_helpers import PNG, b64, seeing  # noqa: F401  (the fixture: a backend that reads images)
from tinytitan.chat_request import ImagePart

GRASS = "The grass is green. The sky is blue."
# the example of Anthropic's citations guide, citations left off
TEXT_DOC = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": GRASS},
            "title": "My Document", "context": "This is a trustworthy document.",
            "cache_control": {"type": "ephemeral"}}
LAID_OUT = ("<document>\n<title>My Document</title>\n<context>This is a trustworthy document.</context>\n"
            f"<document_content>\n{GRASS}\n</document_content>\n</document>")
QUESTION = {"type": "text", "text": "What color is the grass and sky?"}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]}
READ = {"name": "read", "input_schema": {"type": "object"}}


def in_result(*blocks) -> list[dict]:
    return [{"role": "user", "content": "read it"}, CALL,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": list(blocks)}]}]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_plain_text_document_reaches_the_model_and_is_counted_so(serve, stream):
    s = await serve(["Green and blue."] * 2)
    messages = [{"role": "user", "content": [TEXT_DOC, QUESTION]}]
    prompt = rendered(s, body(messages=messages))
    assert f"{LAID_OUT}\n\n{QUESTION['text']}" in prompt
    m = await message(sdk(s), stream, model=MODEL, max_tokens=50, messages=messages)  # checked strictly by serve
    assert m.content[0].text == "Green and blue." and m.stop_reason == "end_turn"
    counted = (await post(s, body(messages=messages), "/v1/messages/count_tokens")).json()["input_tokens"]
    assert counted == m.usage.input_tokens == len(s.engine.backend.encode(chat_request(s, body(messages=messages)))[1])


@pytest.mark.parametrize("content, text", [
    ("One chunk.", "One chunk."),
    ([{"type": "text", "text": "First chunk."}, {"type": "text", "text": "Second chunk."}],
     "First chunk.\n\nSecond chunk."),
])
async def test_a_custom_content_document_reaches_the_model(serve, content, text):
    s = await serve(["ok"])
    doc = {"type": "document", "source": {"type": "content", "content": content}, "title": None}
    prompt = rendered(s, body(messages=[{"role": "user", "content": [doc, QUESTION]}]))
    assert f"<document>\n<document_content>\n{text}\n</document_content>\n</document>" in prompt
    assert "<title>" not in prompt


async def test_a_document_in_a_tool_result_reaches_the_model(serve):
    s = await serve(["ok"])
    messages = in_result({"type": "text", "text": "Here is the file:"}, TEXT_DOC)
    prompt = rendered(s, body(tools=[READ], messages=messages))
    assert f"Here is the file:\n{LAID_OUT}" in prompt
    m = await sdk(s).messages.create(model=MODEL, max_tokens=20, tools=[READ], messages=messages)
    assert m.content[0].text == "ok"


PDF = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}
REFUSED = [  # (the document, the words of the refusal; a media refusal names its {loc} in the API's spelling)
    (dict(TEXT_DOC, citations={"enabled": True}), "citations",
     "'citations' at {at}.citations.enabled is not supported"),
    ({"type": "document", "source": PDF}, "pdf", "Could not process PDF: {loc}.source.type: this model does not "
                                                   "support PDF input: send the document's text as a text source"),
    ({"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}, "url",
     "Could not process PDF: {loc}.source.type: this model does not support PDF input"),
    ({"type": "document", "source": {"type": "file", "file_id": "file_1"}}, "file",
     "Could not process document: {loc}.source.type: file sources are not supported"),
    ({"type": "document", "source": {"type": "content", "content": [TEXT_DOC]}},
     "nested", "document content block type 'document' at {at}.source.content[0].type is not supported"),
    ({"type": "document", "source": {"type": "content", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}},
     "image-file", "Could not process image: {loc}.source.content.content.0.image.source.type: file sources are not "
                   "supported"),
]


@pytest.mark.parametrize("doc, name, words", REFUSED, ids=[r[1] for r in REFUSED])
@pytest.mark.parametrize("nested", [False, True], ids=["turn", "tool_result"])
async def test_what_a_document_cannot_be_here_is_refused_by_name(serve, doc, name, words, nested):
    s = await serve(["never"])
    if nested:
        messages, at = in_result(doc), "messages[2].content[0].content[0]"
        loc = "messages.2.content.0.tool_result.content.0.document"
    else:
        messages, at = [{"role": "user", "content": [doc, QUESTION]}], "messages[0].content[0]"
        loc = "messages.0.content.0.document"
    r = await post(s, body(tools=[READ], messages=messages))
    assert_envelope(r, 400, "invalid_request_error", words.format(at=at, loc=loc))
    with pytest.raises(anthropic.BadRequestError):  # what a client built on the SDK catches
        await sdk(s).messages.count_tokens(model=MODEL, tools=[READ], messages=messages)


async def test_a_text_source_takes_text_plain_only(serve):
    s = await serve(["never"])
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/markdown", "data": "# hi"}}
    r = await post(s, body(messages=[{"role": "user", "content": [doc]}]))
    assert_envelope(r, 400, "invalid_request_error",  # in the API's words and spelling of the place
                    "messages.0.content.0.document.source.text.media_type: Input should be 'text/plain'")


PICTURE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}}
ILLUSTRATED = {"type": "document", "title": "Leaves", "source": {"type": "content", "content": [
    {"type": "text", "text": "A leaf:"}, PICTURE, {"type": "text", "text": "It is red."},
    {"type": "text", "text": "The end."}]}}
# the document's text around its image, where the image stands
AROUND = ("<document>\n<title>Leaves</title>\n<document_content>\nA leaf:",
          "It is red.\n\nThe end.\n</document_content>\n</document>")


@pytest.mark.parametrize("nested", [False, True], ids=["turn", "tool_result"])
async def test_an_image_in_a_custom_content_document_reaches_a_model_that_reads_images(seeing, nested):
    s, backend = seeing
    if nested:
        messages, where = in_result(ILLUSTRATED), "messages[2].content[0].content[0].source.content[1]"
    else:
        messages = [{"role": "user", "content": [ILLUSTRATED, QUESTION]}]
        where = "messages[0].content[0].source.content[1]"
    m = await sdk(s).messages.create(model=MODEL, max_tokens=20, tools=[READ], messages=messages)  # checked strictly
    assert m.content[0].text == "I see it."
    turn = backend.requests[-1].messages[-1]
    image = turn.parts[1]
    assert isinstance(image, ImagePart) and image.data == PNG and image.media_type == "image/png"
    assert image.where == where
    assert turn.parts[0] == AROUND[0] and turn.parts[2] == AROUND[1]
    assert "\n\n".join(AROUND) in turn.content


async def test_an_image_in_a_document_is_refused_by_name_where_the_model_reads_none(serve):
    s = await serve(["never"], model_id="text-only")
    for messages, found, place in (
            ([{"role": "user", "content": [ILLUSTRATED, QUESTION]}], ("0", "0", None),
             "messages.0.content.0.document.source.content.content.1.image"),
            (in_result(ILLUSTRATED), ("2", "0", "0"),
             "messages.2.content.0.tool_result.content.0.document.source.content.content.1.image")):
        r = await post(s, body(model="text-only", tools=[READ], messages=messages))
        d = assert_envelope(r, 400, "invalid_request_error", f"Could not process image: {place}: ",
                            "the model 'text-only' reads text only")
        # the place Claude Code reads, to drop that one document
        assert CLAUDE_CODE_PLACE.search(d["error"]["message"]).groups() == (*found, "document"), d
