"""Images on every protocol: each spelling becomes the same ImagePart (bytes, digest, the part it came from), in
order, for a model that reads images; a text model refuses them in each API's own words; a bad image is a 400
naming the part. Every reply is validated strictly against the SDK models (the ``serve`` fixture)."""

from __future__ import annotations

import base64
import hashlib
import json

import anthropic
import httpx
import ollama
import pytest

from tinytitan import images
from tinytitan.agents import codex_entry
from tinytitan.chat_request import ChatRequest, ImagePart, Message
from tinytitan.engine.backends.scripted import ScriptEntry

from anthropic_util import HEADERS as ANTHROPIC_HEADERS, sdk as anthropic_sdk, message as anthropic_message
from responses_helpers import client as openai_client
from image_helpers import (
    BMP, GIF, HEIC, JPEG, MODEL, PNG, SVG, Seeing, WEBP, post_json, assert_images, b64, data_url, encoded, noise)
from image_helpers import image_host, seeing  # noqa: F401  (the fixtures)


# -- the module ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data,fmt", [(PNG, "PNG"), (JPEG, "JPEG"), (GIF, "GIF"), (WEBP, "WEBP")])
def test_the_four_formats_open(data, fmt):
    part = images.part(data, "", "x")
    info = images.inspect(part)
    assert (info.format, info.width, info.height) == (fmt, 8, 6)
    img = images.open_image(part)
    assert img.mode == "RGB" and img.size == (8, 6)


@pytest.mark.parametrize("make,code,words", [
    (lambda: images.part(BMP, "", "m[0]"), "invalid_image_format", "BMP"),
    (lambda: images.part(b"\x89PNG\r\n\x1a\nnot really", "", "m[0]"), "invalid_image", "damaged or truncated"),
    (lambda: images.part(b"hello", "", "m[0]"), "invalid_image", "not a valid image"),
    (lambda: images.part(PNG[:40], "", "m[0]"), "invalid_image", "not a valid image"),
    (lambda: images.part(PNG[:-20] + b"\0" * 20, "", "m[0]"), "invalid_image", "damaged or truncated"),
    (lambda: images.part(encoded("PNG", (images.MAX_SIDE + 1, 2)), "", "m[0]"), "image_too_large",
     "image dimensions exceed"),
    # an AVIF whose major brand is HEIF's generic mif1 (avif among its compatible brands) is named AVIF, not HEIC
    # (a Pillow with AVIF support opens a whole one: refused as AVIF too; before 11.2 Pillow opens none)
    (lambda: images.part(b"\x00\x00\x00\x1cftypmif1\x00\x00\x00\x00mif1miafavif\x00\x00\x00\x08mdat", "", "m[0]"),
     "invalid_image_format", "image format AVIF is not supported"),
    (lambda: images.part(HEIC, "", "m[0]"), "invalid_image_format", "image format HEIC is not supported"),
    # a web page (a fetched URL's, a site's page for the image) is no image, the icons inlined in it no SVG; an SVG
    # is named after its declaration, comments and DOCTYPE
    (lambda: images.part(b'<!DOCTYPE html>\n<html><body><svg aria-hidden="true" width="16"></svg>'
                         b'<img src="cat.png"></body></html>', "", "m[0]"), "invalid_image", "not a valid image"),
    (lambda: images.part(b'\xef\xbb\xbf<?xml version="1.0"?>\n<!-- Generator: Adobe Illustrator -->\n<!DOCTYPE svg '
                         b'PUBLIC "-//W3C//DTD SVG 1.1//EN" "svg11.dtd" [<!ENTITY ns "http://ns.adobe.com/">]>\n'
                         b'<svg version="1.1" xmlns="http://www.w3.org/2000/svg"/>', "", "m[0]"),
     "invalid_image_format", "image format SVG is not supported"),
])
def test_bad_images_are_refused_naming_the_part(make, code, words):
    with pytest.raises(images.ImageError) as err:
        images.inspect(make())
    assert err.value.code == code and err.value.param == "m[0]" and err.value.kind == "invalid_request"
    assert words in err.value.message and err.value.message.startswith("m[0]: ")


def test_a_truncated_jpeg_is_refused_when_opened():
    part = images.part(JPEG[: len(JPEG) // 2], "", "m[1]")
    with pytest.raises(images.ImageError) as err:
        images.open_image(part)
    assert err.value.code == "invalid_image" and err.value.param == "m[1]"


@pytest.mark.parametrize("url,code,words", [
    ("https://example.com/a.png", "image_url_not_allowed", "--fetch-images"),
    ("HTTP://example.com/a.png", "image_url_not_allowed", "remote image URLs"),
    ("file:///etc/passwd", "image_url_not_allowed", "scheme 'file'"),
    ("not a url", "image_url_not_allowed", "not a URL"),
    ("data:image/png,rawbytes", "invalid_image", "not base64"),
    ("data:image/png;base64,!!!!", "invalid_image", "not valid base64"),
    ("data:image/bmp;base64," + b64(BMP), "invalid_image_format", "image/bmp"),
    ("data:image/png;base64,", "invalid_image", "empty"),
])
def test_urls_other_than_base64_data_urls_are_refused_by_name(url, code, words):
    with pytest.raises(images.ImageError) as err:
        images.from_url(url, "messages[0].content[0]")
    assert err.value.code == code and words in err.value.message, err.value.message


def test_a_data_url_keeps_its_bytes_media_type_and_digest():
    part = images.from_url(f"data:image/png;charset=binary;base64,{b64(PNG)[:10]}\n{b64(PNG)[10:]}", "w")
    assert part == ImagePart(PNG, "image/png", hashlib.sha256(images.PIXELS_VERSION + PNG).hexdigest(), "w")


def test_byte_and_count_limits(monkeypatch):
    with pytest.raises(images.ImageError) as err:
        images.part(b"x" * (images.MAX_BYTES + 1), "", "w")
    assert err.value.code == "image_too_large" and "image exceeds" in err.value.message
    with pytest.raises(images.ImageError) as err:  # refused before decoding base64 over the limit
        images.from_base64("A" * (images.MAX_BYTES // 3 * 4 + 100), "image/png", "w")
    assert err.value.code == "image_too_large"
    many = tuple(images.part(PNG, "image/png", f"messages[0].content[{j}]") for j in range(images.MAX_IMAGES + 1))
    req = ChatRequest(MODEL, (Message("user", "", parts=many),))
    with pytest.raises(images.ImageError) as err:
        images.check_request(req)
    assert err.value.code == "too_many_images" and err.value.param == f"messages[0].content[{images.MAX_IMAGES}]"
    images.check_request(ChatRequest(MODEL, (Message("user", "", parts=many[:-1]),)))


def test_a_text_model_refuses_naming_the_first_image():
    req = ChatRequest(MODEL, (Message("user", "a", parts=("a", images.part(PNG, "", "messages[0].content[1]"))),))
    with pytest.raises(images.ImageInputUnsupported) as err:
        images.refuse_unseen(req, False, "m")
    assert err.value.data == {"where": "messages[0].content[1]", "model": "m", "count": 1}
    images.refuse_unseen(req, True, "m")
    images.refuse_unseen(ChatRequest(MODEL, (Message("user", "a"),)), False, "m")


# -- a vision model: the parts reach the engine intact, on every protocol --------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_chat_image_url_parts(seeing, stream):
    s, backend = seeing
    c = openai_client(s)
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": data_url(PNG), "detail": "high"}},
        {"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": data_url(JPEG, "image/jpeg")}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": data_url(GIF, "image/gif")}}]}]
    if stream:
        text = "".join([ch.choices[0].delta.content or "" async for ch in
                        await c.chat.completions.create(model=MODEL, messages=messages, stream=True) if ch.choices])
    else:
        text = (await c.chat.completions.create(model=MODEL, messages=messages)).choices[0].message.content
    assert text == "I see it."
    req = backend.requests[-1]
    assert_images(req, [(PNG, "image/png", "messages[0].content[1]"), (JPEG, "image/jpeg", "messages[0].content[3]"),
                        (GIF, "image/gif", "messages[2].content[0]")])
    user = req.messages[0]
    assert user.content == "look\nand" and user.parts[0] == "look" and user.parts[2] == "and"
    assert req.messages[1].tool_calls[0].name == "shot" and req.messages[2].role == "tool"


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_input_image_in_messages_and_tool_outputs(seeing, stream):
    s, backend = seeing
    c = openai_client(s)
    items = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": data_url(WEBP, "image/webp"), "detail": "auto"}]},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{\"path\": \"a.png\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_image", "image_url": data_url(PNG), "detail": "original"}]}]
    if stream:
        events = [e async for e in await c.responses.create(model=MODEL, input=items, stream=True)]
        assert events[-1].type == "response.completed"
        text = events[-1].response.output_text
    else:
        text = (await c.responses.create(model=MODEL, input=items)).output_text
    assert text == "I see it."
    req = backend.requests[-1]
    assert_images(req, [(WEBP, "image/webp", "input[0].content[1]"), (PNG, "image/png", "input[2].output[0]")])
    assert req.messages[-1].role == "tool" and req.messages[-1].tool_call_id == "c1"


async def test_responses_images_over_the_websocket(seeing, serve):
    # Codex's built-in provider sends view_image's picture over the socket; a text model's refusal comes in band
    import trio
    from httpx_ws import aconnect_ws

    s, backend = seeing
    text = await serve(["never"], model_id="text-only")
    items = [{"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": [
                 {"type": "input_image", "image_url": data_url(PNG)}]}]
    async with httpx.AsyncClient() as client:
        for server, model in ((s, MODEL), (text, "text-only")):
            async with aconnect_ws(server.url("/v1/responses"), client) as ws:
                await ws.send_text(json.dumps({"type": "response.create", "model": model, "store": False,
                                               "input": items}))
                with trio.fail_after(10):
                    frames = [json.loads(await ws.receive_text())]
                    while frames[-1]["type"] not in ("response.completed", "error"):
                        frames.append(json.loads(await ws.receive_text()))
            if server is s:
                assert frames[-1]["type"] == "response.completed", frames[-1]
                assert_images(backend.requests[-1], [(PNG, "image/png", "input[1].output[0]")])
            else:
                (error,) = frames
                assert error["status"] == 400 and error["error"]["param"] == "input[1].output[0]"
                assert "input_image is only supported by certain models" in error["error"]["message"]


async def test_responses_images_of_a_stored_chain_are_named_by_their_item(seeing):
    s, backend = seeing
    c = openai_client(s)
    first = await c.responses.create(model=MODEL, input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": data_url(PNG)}]}])
    await c.responses.create(model=MODEL, previous_response_id=first.id, input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": data_url(JPEG, "image/jpeg")}]}])
    (old, new) = backend.requests[-1].images
    assert old.data == PNG and old.where.startswith("item 'msg_") and old.where.endswith(".content[0]")
    assert new.data == JPEG and new.where == "input[0].content[0]"


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_image_blocks_in_user_turns_and_tool_results(seeing, stream):
    s, backend = seeing
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "read it"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": b64(PNG)}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.gif"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "the file"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": b64(GIF)}}]},
            {"type": "image", "source": {"type": "url", "url": data_url(JPEG, "image/jpeg")},
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "and this"}]}]
    reply = await anthropic_message(anthropic_sdk(s), stream, model=MODEL, max_tokens=64, messages=messages)
    assert reply.content[0].text == "I see it."
    req = backend.requests[-1]
    assert_images(req, [(PNG, "image/png", "messages[0].content[1]"),
                        (GIF, "image/gif", "messages[2].content[0].content[1]"),
                        (JPEG, "image/jpeg", "messages[2].content[1]")])
    tool, user = req.messages[-2:]
    assert tool.role == "tool" and tool.content == "the file" and tool.parts[0] == "the file"
    assert user.role == "user" and user.content == "and this" and user.parts[-1] == "and this"


async def test_anthropic_count_tokens_takes_images(seeing):
    s, backend = seeing
    n = await anthropic_sdk(s).messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": b64(WEBP)}}]}])
    assert n.input_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_ollama_images_on_chat_and_generate(seeing, stream):
    s, backend = seeing
    c = ollama.AsyncClient(host=s.base)
    messages = [{"role": "user", "content": "two pictures", "images": [PNG, b64(JPEG)]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "a data URL too", "images": [data_url(WEBP, "image/webp")]}]
    if stream:
        text = "".join([p.message.content async for p in await c.chat(model=MODEL, messages=messages, stream=True)])
    else:
        text = (await c.chat(model=MODEL, messages=messages)).message.content
    assert text == "I see it."
    assert_images(backend.requests[-1], [(PNG, "", "messages[0].images[0]"), (JPEG, "", "messages[0].images[1]"),
                                         (WEBP, "image/webp", "messages[2].images[0]")])
    assert backend.requests[-1].messages[0].parts[-1] == "two pictures"
    if stream:
        text = "".join([p.response async for p in await c.generate(model=MODEL, prompt="what", images=[GIF], stream=True)])
    else:
        text = (await c.generate(model=MODEL, prompt="what", images=[GIF])).response
    assert text == "I see it."
    assert_images(backend.requests[-1], [(GIF, "", "images[0]")])


async def test_the_models_say_which_take_images(seeing, serve):
    s, _ = seeing
    text = await serve(["ok"], model_id="text-only")
    async with httpx.AsyncClient() as h:
        for server, modalities in ((s, ["text", "image"]), (text, ["text"])):
            listed = (await h.get(server.url("/v1/models"))).json()["data"][0]
            assert listed["input_modalities"] == modalities
            one = (await h.get(server.url("/v1/models"), headers=ANTHROPIC_HEADERS)).json()["data"][0]
            assert one["capabilities"]["image_input"] == {"supported": modalities == ["text", "image"]}
            shown = (await h.post(server.url("/api/show"), json={"model": listed["id"]})).json()
            assert ("vision" in shown["capabilities"]) == (modalities == ["text", "image"])
            assert codex_entry(server.engine.models()[0])["input_modalities"] == modalities


# -- a text model refuses images in each API's own words ----------------------------------------------------


TEXT_MODEL_REFUSALS = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": data_url(PNG)}}]}]},
     "messages[0].content[1]", "Invalid content type. image_url is only supported by certain models"),
    ("/v1/responses", {"input": [{"type": "function_call", "call_id": "c", "name": "view_image", "arguments": "{}"},
                                 {"type": "function_call_output", "call_id": "c", "output": [
                                     {"type": "input_image", "image_url": data_url(PNG)}]}]},
     "input[1].output[0]", "Invalid content type. input_image is only supported by certain models"),
    ("/v1/messages", {"max_tokens": 10, "messages": [
        {"role": "user", "content": "read"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}}]}]}]},
     "messages.2.content.0.tool_result.content.0.image",  # the API's spelling, which Claude Code reads
     "Could not process image: messages.2.content.0.tool_result.content.0.image: "),
    ("/api/chat", {"messages": [{"role": "user", "content": "x", "images": [b64(PNG)]}]},
     "messages[0].images[0]", "text-only does not support vision"),
    ("/api/generate", {"prompt": "x", "images": [b64(PNG)]}, "images[0]", "text-only does not support vision"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path,body,where,words", TEXT_MODEL_REFUSALS, ids=[r[0] for r in TEXT_MODEL_REFUSALS])
async def test_a_text_model_refuses_images_in_its_apis_words(serve, path, body, where, words, stream):
    s = await serve(["never"], model_id="text-only")
    headers = ANTHROPIC_HEADERS if path == "/v1/messages" else {}
    r = await post_json(s, path, {"model": "text-only", "stream": stream, **body}, headers)
    assert r.status_code == 400, r.text
    err = r.json()
    message = err["error"] if isinstance(err["error"], str) else err["error"]["message"]
    assert words in message and where in message, message
    if path.startswith("/v1/") and path != "/v1/messages":
        assert err["error"]["param"] == where and err["error"]["type"] == "invalid_request_error"
    if path == "/v1/messages":
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"


async def test_a_text_model_refuses_through_the_sdks(serve):
    # the SDKs raise their own 400 classes: what an agent catches and recovers from
    s = await serve(["never"], model_id="text-only")
    with pytest.raises(anthropic.BadRequestError) as err:
        await anthropic_sdk(s).messages.create(model="text-only", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}}]}])
    assert err.value.message.startswith("Could not process image") or "Could not process image" in str(err.value)
    with pytest.raises(ollama.ResponseError) as err:
        await ollama.AsyncClient(host=s.base).chat(model="text-only", messages=[{"role": "user", "content": "x",
                                                                                   "images": [PNG]}])
    assert err.value.status_code == 400 and "does not support vision" in err.value.error


async def test_documents_are_refused_in_anthropics_pdf_wording(serve):
    s = await serve(["never"])
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    for content, where in (([pdf], "messages.0.content.0.document"),
                           ([{"type": "tool_result", "tool_use_id": "t", "content": [pdf]}],
                            "messages.0.content.0.tool_result.content.0.document")):
        r = await post_json(s, "/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [
            {"role": "user", "content": content}]}, ANTHROPIC_HEADERS)
        msg = r.json()["error"]["message"]
        assert r.status_code == 400 and msg.startswith("Could not process PDF: ") and where in msg
        assert "does not support pdf input" in msg.lower()


# -- bad images for a vision model: a 400 naming the part, in each envelope ---------------------------------
def chat_body(url: str) -> tuple[str, dict, dict]:
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}]}, {}


def responses_body(url: str):
    return "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": url}]}]}, {}


def anthropic_body(url: str):
    source = {"type": "url", "url": url}
    return "/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": source}]}]}, ANTHROPIC_HEADERS


def ollama_body(url: str):
    return "/api/chat", {"messages": [{"role": "user", "content": "x", "images": [url.split(",", 1)[-1]]}]}, {}


BAD = [(data_url(b"this is not an image"), "invalid_image", "not a valid image"),
       (data_url(BMP, "image/png"), "invalid_image_format", "BMP"),
       (data_url(HEIC, "image/png"), "invalid_image_format", "image format HEIC is not supported"),
       (data_url(SVG, "image/png"), "invalid_image_format", "image format SVG is not supported"),
       (data_url(encoded("PNG", (2, images.MAX_SIDE + 1))), "image_too_large", "image dimensions exceed"),
       (data_url(PNG[:60]), "invalid_image", "damaged or truncated")]
WHERE = {"/v1/chat/completions": "messages[0].content[0]", "/v1/responses": "input[0].content[0]",
         "/v1/messages": "messages.0.content.0.image", "/api/chat": "messages[0].images[0]"}


@pytest.mark.parametrize("shape", [chat_body, responses_body, anthropic_body, ollama_body],
                         ids=["chat", "responses", "messages", "ollama"])
async def test_bad_images_are_a_400_naming_the_part(seeing, shape):
    s, backend = seeing
    for url, code, words in BAD:
        path, body, headers = shape(url)
        r = await post_json(s, path, {"model": MODEL, **body}, headers)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        message = err if isinstance(err, str) else err["message"]
        assert words in message and WHERE[path] in message, message
        if path == "/v1/messages":
            assert message.startswith("Could not process image: ")
        elif path != "/api/chat":
            assert err["code"] == code and err["param"] == WHERE[path]
    assert backend.requests == []  # refused before the engine prepared anything


async def test_remote_urls_and_file_ids_are_refused_by_name(seeing):
    s, _ = seeing
    for shape in (chat_body, responses_body, anthropic_body):
        path, body, headers = shape("https://example.com/cat.png")
        r = await post_json(s, path, {"model": MODEL, **body}, headers)
        assert r.status_code == 400 and "--fetch-images" in r.json()["error"]["message"], r.text
    r = await post_json(s, "/v1/responses", {"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].content[0].file_id"
    r = await post_json(s, "/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]}, ANTHROPIC_HEADERS)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("Could not process image: ")


async def test_base64_in_lines_counts_only_its_data_against_the_limit(seeing, monkeypatch):
    """Base64 wrapped in lines (Python's ``base64.encodebytes``, MIME's 76 columns) of an image within the byte
    limit is taken on every protocol: its line breaks are not data. Over the limit, it is refused with its size."""
    s, backend = seeing
    data = noise()
    wrapped = base64.encodebytes(data).decode()
    monkeypatch.setattr(images, "MAX_BYTES", len(data))
    c = openai_client(s)
    await c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + wrapped}}]}])
    await anthropic_sdk(s).messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": wrapped}}]}])
    r = await post_json(s, "/api/chat", {"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "x", "images": [wrapped]}]})
    assert r.status_code == 200, r.text
    assert [[p.data for p in req.images] for req in backend.requests] == [[data]] * 3
    monkeypatch.setattr(images, "MAX_BYTES", len(data) - 100)  # (refused before decoding)
    path, body, headers = chat_body("data:image/png;base64," + wrapped)
    r = await post_json(s, path, {"model": MODEL, **body}, headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "image_too_large", r.text
    assert f" {len(data)} bytes > {len(data) - 100} bytes" in r.json()["error"]["message"]


async def test_too_many_images_in_one_request(seeing, monkeypatch):
    s, backend = seeing
    monkeypatch.setattr(images, "MAX_IMAGES", 3)
    parts = [{"type": "image_url", "image_url": {"url": data_url(PNG)}}] * 4
    r = await post_json(s, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": parts}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_images"
    assert r.json()["error"]["param"] == "messages[0].content[3]"


async def test_images_only_where_the_api_takes_them(seeing):
    s, _ = seeing
    image = {"type": "image_url", "image_url": {"url": data_url(PNG)}}
    r = await post_json(s, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "system", "content": [image]},
                                                                                 {"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[0].type"
    r = await post_json(s, "/v1/responses", {"model": MODEL, "input": [{"role": "developer", "content": [
        {"type": "input_image", "image_url": data_url(PNG)}]}, {"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "in the developer message (input[0])" in r.json()["error"]["message"]
    r = await post_json(s, "/v1/responses", {"model": MODEL, "input": [{"role": "assistant", "content": [
        {"type": "input_image", "image_url": data_url(PNG)}]}, {"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "in the assistant message (input[0])" in r.json()["error"]["message"]
    r = await post_json(s, "/api/chat", {"model": MODEL, "messages": [
        {"role": "assistant", "content": "x", "images": [b64(PNG)]}, {"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "in the assistant message (messages[0].images)" in r.json()["error"], r.text
    r = await post_json(s, "/api/generate", {"model": MODEL, "prompt": "x", "raw": True, "images": [b64(PNG)]})
    assert r.status_code == 400 and "raw" in r.json()["error"]


# -- remote URLs, fetched where the operator turned it on (--fetch-images) ---------------------------------


async def test_remote_images_are_fetched_with_the_flag(serve, demo_tok, image_host):
    backend = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend, fetch_images=True)
    c = openai_client(s)
    await c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_host + "/a.png"}},
        {"type": "image_url", "image_url": {"url": image_host + "/moved"}},
        {"type": "image_url", "image_url": {"url": data_url(GIF, "image/gif")}}]}])
    assert_images(backend.requests[-1], [(PNG, "image/png", "messages[0].content[0]"),
                                         (PNG, "image/png", "messages[0].content[1]"),
                                         (GIF, "image/gif", "messages[0].content[2]")])
    await c.responses.create(model=MODEL, input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": image_host + "/b.jpg"}]}])
    assert_images(backend.requests[-1], [(JPEG, "image/jpeg", "input[0].content[0]")])
    await anthropic_sdk(s).messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "text", "text": "x"}, {"type": "image", "source": {"type": "url", "url": image_host + "/a.png"}}]}])
    assert_images(backend.requests[-1], [(PNG, "image/png", "messages[0].content[1]")])


async def test_an_image_url_in_ollamas_images_is_refused_by_name_or_fetched_with_the_flag(seeing, serve, demo_tok,
                                                                                          image_host):
    """Ollama takes base64, but some clients pass an image's URL on as they got it (LangChain's ChatOllama): it is
    refused by name, not as base64 it is not, and fetched where the server fetches remote images."""
    s, _ = seeing
    r = await post_json(s, "/api/chat", {"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "x", "images": [image_host + "/a.png"]}]})
    assert r.status_code == 400 and r.json()["error"].startswith(
        "messages[0].images[0]: remote image URLs are not fetched by this server"), r.text
    backend = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    f = await serve(backend=backend, fetch_images=True)
    r = await post_json(f, "/api/chat", {"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "x", "images": [b64(GIF), image_host + "/a.png"]}]})
    assert r.status_code == 200, r.text
    assert_images(backend.requests[-1], [(GIF, "", "messages[0].images[0]"),
                                         (PNG, "image/png", "messages[0].images[1]")])
    r = await post_json(f, "/api/generate", {"model": MODEL, "stream": False, "prompt": "x",
                                             "images": [image_host + "/b.jpg"]})
    assert r.status_code == 200, r.text
    assert_images(backend.requests[-1], [(JPEG, "image/jpeg", "images[0]")])


async def test_a_fetch_that_fails_is_a_400_naming_the_part(serve, demo_tok, image_host, monkeypatch):
    from tinytitan.http import fetch

    monkeypatch.setattr(fetch, "TIMEOUT_SECONDS", 1.0)
    monkeypatch.setattr(images, "MAX_BYTES", len(PNG) * 10)
    backend = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend, fetch_images=True)
    for path, words in (("/missing", "answered 404"), ("/slow", "no answer within 1 s"), ("/big", "exceeds"),
                        ("/text", "not a valid image")):
        r = await post_json(s, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": image_host + path}}]}]})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "messages[0].content[1]" and words in err["message"], err
        path_, body, headers = anthropic_body(image_host + path)
        r = await post_json(s, path_, {"model": MODEL, **body}, headers)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("Could not process image: ")
    assert backend.requests == []
    r = await post_json(s, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/unreachable.png"}}]}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "image_url_fetch_failed"
    # URLs httpx cannot even read (once a 500)
    for url in ("http://[::1/x.png", "http://a\x00b/x.png", f"http://{'a' * 70}.example/x.png"):
        r = await post_json(s, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}]}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "image_url_fetch_failed", (url, r.text)


async def test_a_remote_url_in_upper_case_or_json_escapes_is_fetched_too(serve, demo_tok, image_host):
    """The shortcut that skips bodies holding no URL read only a lower-case 'http' in the raw bytes: an upper-case
    scheme or a JSON-escaped one was refused as if fetching were off."""
    backend = Seeing([ScriptEntry("I see it.")] * 2, demo_tok, model_id=MODEL)
    s = await serve(backend=backend, fetch_images=True)
    for url in (image_host.replace("http", "HTTP") + "/a.png", image_host.replace("h", "\\u0068", 1) + "/a.png"):
        body = ('{"model": "%s", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": '
                '{"url": "%s"}}]}]}' % (MODEL, url)).encode()
        async with httpx.AsyncClient(timeout=30) as h:
            r = await h.post(s.url("/v1/chat/completions"), content=body, headers={"content-type": "application/json"})
        assert r.status_code == 200, (url, r.text)
        assert_images(backend.requests[-1], [(PNG, "image/png", "messages[0].content[0]")])


async def test_blanks_around_an_image_url_are_no_part_of_it(seeing, serve, demo_tok, image_host):
    """A client that formats its URLs may leave blanks around them: a data URL was refused as scheme '  data', a
    remote one as not a URL, or it went unfetched. Chat's image_url, Messages' url source, Ollama's images."""
    s, backend = seeing
    url = f" \n{data_url(PNG)}  "
    r = await openai_client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}])
    assert r.choices[0].message.content == "I see it."
    assert_images(backend.requests[-1], [(PNG, "image/png", "messages[0].content[0]")])
    await anthropic_sdk(s).messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": url}}]}])
    assert [i.data for i in backend.requests[-1].images] == [PNG]
    async with httpx.AsyncClient(timeout=30) as h:  # (the ollama package takes base64 or a file path only)
        r = await h.post(s.url("/api/chat"), json={"model": MODEL, "stream": False, "messages": [
            {"role": "user", "content": "x", "images": [url]}]})
    assert r.status_code == 200, r.text
    assert backend.requests[-1].messages[0].parts[0].data == PNG
    fetching = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    f = await serve(backend=fetching, fetch_images=True)
    await openai_client(f).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"  {image_host}/a.png "}}]}])
    assert_images(fetching.requests[-1], [(PNG, "image/png", "messages[0].content[0]")])
