"""The bare root, as Ollama answers it: ``GET /`` and ``HEAD /`` are 200 ``Ollama is running`` (text/plain), whatever
the Accept (server/routes.go). Ollama's own CLI checks the server with ``HEAD /`` (api/client.go, ``Heartbeat``:
any status under 400, sent with ``Accept: application/json``); n8n's Ollama credential and Page Assist probe
``GET <base URL>`` for a 2xx; scripts and small clients match the text (axios: ``response.data === "Ollama is
running"``; Homebrew's formula test: ``curl -s localhost:PORT``), as Ollama's maintainers point users to
``curl localhost:11434`` for a health check. A browser's navigation (text/html ranked above ``*/*``) still gets
the dashboard, and the dashboard's own probe (``Accept: application/json``) the JSON status."""

from __future__ import annotations

import httpx
import pytest

OLLAMA = "Ollama is running"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
AXIOS = "application/json, text/plain, */*"
GO_CLIENT = {"accept": "application/json", "content-type": "application/json",
             "user-agent": "ollama/0.13.0 (amd64 linux) Go/go1.24.1"}


@pytest.mark.parametrize("accept", ["*/*", AXIOS, "text/plain", None])  # curl, fetch, requests; axios; no Accept
async def test_an_http_client_gets_ollamas_answer(serve, accept):
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        if accept is None:
            del c.headers["accept"]
        r = await c.get(s.url("/"), headers={} if accept is None else {"accept": accept})
    assert r.status_code == 200
    assert r.text == OLLAMA
    assert r.headers["content-type"] == "text/plain; charset=utf-8"


async def test_the_ollama_clis_heartbeat_and_a_bare_head_are_200(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        heartbeat = await c.head(s.url("/"), headers=GO_CLIENT)
        bare = await c.head(s.url("/"))
        assert (await c.get(s.url("/api/version"))).status_code == 200  # the same connection answers on
    assert heartbeat.status_code == 200 and heartbeat.content == b""
    assert bare.status_code == 200 and bare.content == b""
    assert bare.headers["content-type"] == "text/plain; charset=utf-8"  # GET's headers, as Ollama's HEAD /
    assert bare.headers["content-length"] == str(len(OLLAMA))


async def test_a_browser_still_gets_the_dashboard_and_its_probe_the_json_status(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        page = await c.get(s.url("/"), headers={"accept": BROWSER})
        head = await c.head(s.url("/"), headers={"accept": BROWSER})
        status = await c.get(s.url("/"), headers={"accept": "application/json"})  # dashboard.html's fetch("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<html" in page.text.lower() and "connect-src 'self'" in page.headers["content-security-policy"]
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/html") and head.content == b""
    assert status.json() == {"name": "tinytitan", "status": "ok", "model": "tinytitan-scripted",
                             "api_key_required": False}


async def test_with_a_key_the_root_answers_the_same_and_the_host_and_origin_guards_hold(serve):
    s = await serve(["ok"], api_key="sesame")
    async with httpx.AsyncClient() as c:
        plain = await c.get(s.url("/"))
        heartbeat = await c.head(s.url("/"), headers=GO_CLIENT)
        status = (await c.get(s.url("/"), headers={"accept": "application/json"})).json()
        assert plain.status_code == 200 and plain.text == OLLAMA
        assert heartbeat.status_code == 200
        assert status["api_key_required"] is True and "model" not in status  # the model id needs the key
        for accept in ("*/*", AXIOS, BROWSER, "application/json"):
            for method in ("GET", "HEAD"):
                for refused, code in (({"host": "attacker.example"}, "host_not_allowed"),
                                      ({"origin": "https://attacker.example"}, "origin_not_allowed")):
                    r = await c.request(method, s.url("/"), headers={**refused, "accept": accept})
                    assert r.status_code == 403, (method, accept, refused)
                    if method == "GET":
                        assert r.json()["error"]["code"] == code


@pytest.mark.parametrize("api_key", [None, "sesame"])
async def test_every_answer_of_the_root_says_it_varies_by_accept(serve, api_key):
    """One URL, three bodies chosen by Accept: a cache (a proxy's, a browser's) that is not told so serves the
    first it stored to every client: the dashboard to ``ollama``'s heartbeat, or Ollama's text to a browser."""
    s = await serve(["ok"], **({"api_key": api_key} if api_key else {}))
    async with httpx.AsyncClient() as c:
        for accept in ("*/*", AXIOS, "text/plain", BROWSER, "application/json"):
            for method in ("GET", "HEAD"):
                r = await c.request(method, s.url("/"), headers={"accept": accept})
                assert r.status_code == 200, (method, accept)
                assert "accept" in vary(r), (method, accept, r.headers)
                # with a key, the JSON status names the model only to a client that sends it: the key varies it too
                assert ({"authorization", "x-api-key"} <= set(vary(r))) == bool(api_key), (method, accept, r.headers)
                if api_key:
                    keyed = await c.request(method, s.url("/"), headers={"accept": accept, "x-api-key": api_key})
                    assert vary(keyed) == vary(r), (method, accept, keyed.headers)
        page = await c.get(s.url("/"), headers={"accept": "application/json", "origin": "http://localhost:3000"})
        assert page.status_code == 200 and {"accept", "origin"} <= set(vary(page)), page.headers  # (a page's: both)


def vary(r: httpx.Response) -> list[str]:
    return [v.strip().lower() for v in r.headers.get("vary", "").split(",")]
