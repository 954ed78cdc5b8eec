"""With --fetch-images, the body whose remote image URLs are fetched is read as validation reads it: a lone
surrogate escape (a JavaScript client's emoji cut in half) is U+FFFD there too, not raw bytes that make the
rewritten body "not UTF-8"; a number past a double is refused naming its field, not as a bare ``Infinity``."""

from __future__ import annotations

import httpx
import pytest

from image_helpers import counting_host  # noqa: F401 (the fixture)
from image_helpers import MODEL, PNG, Seeing, assert_images
from tinytitan.engine.backends.scripted import ScriptEntry


def body(url: str, extra: str = "") -> bytes:
    return ('{"model": "%s", "max_tokens": 5%s, "messages": [{"role": "user", "content": [{"type": "text", '
            '"text": "look \\ud83d"}, {"type": "image_url", "image_url": {"url": "%s"}}]}]}' % (MODEL, extra, url)
            ).encode()


async def test_a_lone_surrogate_beside_a_fetched_image_is_read_as_without_fetching(serve, demo_tok, counting_host):
    base, hits = counting_host
    backend = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend, fetch_images=True)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), content=body(base + "/shot.png"),
                         headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert hits == {"/shot.png": 1}
    req = backend.requests[-1]
    assert_images(req, [(PNG, "image/png", "messages[0].content[1]")])
    assert "look \ufffd" in req.messages[0].content


@pytest.mark.parametrize("extra, param", [(', "temperature": 1e400', "temperature"),
                                          (', "temperature": NaN', None)])
async def test_a_number_json_refuses_is_refused_as_without_fetching(serve, demo_tok, counting_host, extra, param):
    base, hits = counting_host
    s = await serve(backend=Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL), fetch_images=True)
    async with httpx.AsyncClient(timeout=30) as c:
        plain = await c.post(s.url("/v1/chat/completions"), content=body("data:image/png;base64,AAAA", extra),
                             headers={"content-type": "application/json"})
        fetched = await c.post(s.url("/v1/chat/completions"), content=body(base + "/shot.png", extra),
                               headers={"content-type": "application/json"})
    assert fetched.status_code == plain.status_code == 400, fetched.text
    assert fetched.json() == plain.json()
    assert fetched.json()["error"]["param"] == param
    assert hits == {}  # refused before anything is fetched
