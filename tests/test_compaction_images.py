"""Images in a conversation that is compacted (``/v1/responses/compact``, a ``compaction_trigger`` turn,
``context_management``): read and refused as the same request's would be (a damaged image, a remote URL the
server does not fetch: the same 400s, named by their place), shown to a model that reads images in the summary
pass, where they stand, and ``[image]`` to a text model."""

from __future__ import annotations

import pytest

from tinytitan.chat_request import ImagePart
from tinytitan.engine.backends.scripted import ScriptEntry

from responses_helpers import MODEL, post
from image_helpers import PNG, Seeing, data_url

SUMMARY = "Requirements: look at the screenshot. Next step: fix the layout."


def history(url: str) -> list[dict]:
    return [{"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "The page looks wrong:"}, {"type": "input_image", "image_url": url}]},
            {"type": "message", "role": "assistant", "content": "I will look at it."},
            {"type": "message", "role": "user", "content": "Go on."}]


DAMAGED = data_url(PNG[:-20] + b"\0" * 20)
REMOTE = "https://example.com/screenshot.png"
ROUTES = {  # each way a conversation is compacted, as a body for its route
    "compact": lambda url: ("/v1/responses/compact", {"model": MODEL, "input": history(url)}),
    "trigger": lambda url: ("/v1/responses", {"model": MODEL, "stream": True, "store": False,
                                               "input": history(url) + [{"type": "compaction_trigger"}]}),
    "context_management": lambda url: ("/v1/responses", {"model": MODEL, "store": False, "input": history(url),
                                                          "context_management": [{"type": "compaction",
                                                                                  "compact_threshold": 1}]}),
}


@pytest.fixture
async def seeing(serve, demo_tok):
    backend = Seeing([ScriptEntry(SUMMARY), ScriptEntry("Done.")], demo_tok, model_id=MODEL)
    return await serve(backend=backend), backend


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("url,code", [(DAMAGED, "invalid_image"), (REMOTE, "image_url_not_allowed")],
                         ids=["damaged", "remote"])
async def test_a_bad_image_is_refused_as_a_request_refuses_it(seeing, route, url, code):
    s, backend = seeing
    plain = await post(s, "/v1/responses", {"model": MODEL, "store": False, "input": history(url)})
    path, body = ROUTES[route](url)
    resp = await post(s, path, body)
    assert plain.status_code == 400 and plain.json()["error"]["code"] == code, plain.text
    assert resp.status_code == 400 and resp.json() == plain.json(), resp.text
    assert resp.json()["error"]["param"] == "input[0].content[1]"
    assert backend.requests == []  # nothing was summarised
    # (context_management refused it before too: the request's own prompt reads the image)


@pytest.mark.parametrize("route", ROUTES)
async def test_a_model_that_reads_images_summarises_them(seeing, route):
    s, backend = seeing
    path, body = ROUTES[route](data_url(PNG))
    resp = await post(s, path, body)
    assert resp.status_code == 200, resp.text
    summary = backend.requests[0]  # the summary pass
    assert [(p.data, p.where) for p in summary.images] == [(PNG, "input[0].content[1]")]
    turn = summary.messages[-1]
    assert isinstance(turn.parts[1], ImagePart) and turn.parts[0].endswith("User: The page looks wrong:\n")
    assert "[image]" not in turn.content and "Assistant: I will look at it." in turn.content


async def test_a_text_model_reads_image_marks(serve, demo_tok):
    from backends import Asked

    backend = Asked([ScriptEntry(SUMMARY)], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    resp = await post(s, "/v1/responses/compact", {"model": MODEL, "input": history(data_url(PNG))})
    assert resp.status_code == 200, resp.text
    summary = backend.requests[0]
    assert summary.images == () and "User: The page looks wrong:\n[image]" in summary.messages[-1].content
    resp = await post(s, "/v1/responses/compact", {"model": MODEL, "input": history(DAMAGED)})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_image", resp.text
    assert resp.json()["error"]["param"] == "input[0].content[1]"


def trace(url: str) -> dict:
    return {"id": "trace-1", "items": history(url)}


@pytest.mark.parametrize("url,code", [(DAMAGED, "invalid_image"), (REMOTE, "image_url_not_allowed")],
                         ids=["damaged", "remote"])
async def test_a_traces_bad_image_is_refused_by_its_place(seeing, url, code):
    """Codex's ``trace_summarize`` reads a trace's images as ``/compact`` reads its input's: a damaged one, or a
    remote one the server does not fetch, is its 400 naming the trace's item (it was ``[image]``, unread)."""
    s, backend = seeing
    resp = await post(s, "/v1/memories/trace_summarize", {"model": MODEL, "traces": [trace(data_url(PNG)),
                                                                                       trace(url)]})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == code, resp.text
    assert resp.json()["error"]["param"] == "traces[1].items[0].content[1]"
    assert backend.requests == []  # no trace was summarised


async def test_a_model_that_reads_images_sees_a_traces_images(seeing):
    s, backend = seeing
    resp = await post(s, "/v1/memories/trace_summarize", {"model": MODEL, "traces": [trace(data_url(PNG))]})
    assert resp.status_code == 200, resp.text
    summary = backend.requests[0]
    assert [(p.data, p.where) for p in summary.images] == [(PNG, "traces[0].items[0].content[1]")]
    assert "[image]" not in summary.messages[-1].content
