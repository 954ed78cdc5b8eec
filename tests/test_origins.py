"""Web pages may use the server only from an allowed origin (http/origins.py): a request or a WebSocket upgrade
whose ``Origin`` is not allowed is a 403 in the route's own envelope; loopback pages, the server's own and the
origins the user allows are answered, with the CORS headers a browser needs; requests without ``Origin`` (CLIs,
SDKs) are untouched. Also: the Host header is parsed strictly."""

from __future__ import annotations

import json

import httpx
import pytest
from httpx_ws import WebSocketUpgradeError, aconnect_ws

import strict
from rawhttp import RawConnection
from websocket_helpers import upgrade_headers
from tinytitan.flags import build_parser
from tinytitan.serve import allowed_origins
from tinytitan.http.guard import host_name
from tinytitan.http.origins import OriginPolicy, allow_list

MODEL = "tinytitan-scripted"
EVIL = "http://evil.example:8080"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
# one route of every family, with a body it accepts, and the envelope its errors come in
ROUTES = [
    ("POST", "/v1/chat/completions", CHAT, "openai"),
    ("POST", "/v1/completions", {"model": MODEL, "prompt": "hi"}, "openai"),
    ("POST", "/v1/responses", {"model": MODEL, "input": "hi"}, "openai"),
    ("POST", "/v1/messages", {"model": MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]},
     "anthropic"),
    ("POST", "/v1/messages/count_tokens", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
     "anthropic"),
    ("POST", "/api/chat", {**CHAT, "stream": False}, "ollama"),
    ("POST", "/api/generate", {"model": MODEL, "prompt": "hi", "stream": False}, "ollama"),
    ("GET", "/api/tags", None, "ollama"),
    ("GET", "/v1/models", None, "openai"),
    ("POST", "/v1/models/unload", {"model": MODEL}, "openai"),
    ("GET", "/health", None, "openai"),
    ("GET", "/", None, "openai"),
    ("GET", "/metrics", None, "openai"),
    ("GET", "/dashboard", None, "openai"),
    ("GET", "/dashboard/events", None, "openai"),
]


def refused(r: httpx.Response, envelope: str, origin: str = EVIL) -> None:
    assert r.status_code == 403, r.text
    assert "access-control-allow-origin" not in r.headers
    body = r.json()
    if envelope == "openai":
        strict.openai_error(body)
        assert body["error"]["code"] == "origin_not_allowed"
        message = body["error"]["message"]
    elif envelope == "anthropic":
        strict.anthropic_error(body)
        assert body["error"]["type"] == "permission_error"
        message = body["error"]["message"]
    else:
        assert set(body) == {"error"}
        message = body["error"]
    assert f"Origin '{origin}' is not allowed" in message


@pytest.mark.parametrize("method, path, body, envelope", ROUTES)
async def test_a_page_from_another_origin_is_refused_in_the_routes_envelope(serve, method, path, body, envelope):
    s = await serve(["Hello."])
    async with httpx.AsyncClient() as client:
        # text/plain: the CORS "simple request" a page can send without a preflight
        content = json.dumps(body).encode() if body is not None else None
        r = await client.request(method, s.url(path), content=content,
                                 headers={"origin": EVIL, "content-type": "text/plain"})
        refused(r, envelope)
        assert s.engine.backend.tokens_decoded == 0  # nothing ran
        # the same request without an Origin (a CLI, an SDK) is answered as before (a feed: its head is enough)
        async with client.stream(method, s.url(path), content=content,
                                 headers={"content-type": "application/json"}) as r:
            assert r.status_code < 400, await r.aread()
            assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("origin", ["null", "http://evil.example", "https://127.0.0.1.evil.example",
                                    "http://localhost.evil.example:5173", "http://[::1]evil.example",
                                    "http://127.0.0.1@evil.example", "file://", "http://evil.example, "
                                    "http://localhost", "chrome-extension://abcdef", "http://127.0.0.2:80"])
async def test_origins_that_are_not_loopback_are_refused(serve, origin):
    s = await serve(["Hello."])
    async with httpx.AsyncClient() as client:
        r = await client.post(s.url("/v1/chat/completions"), json=CHAT, headers={"origin": origin})
        refused(r, "openai", origin)


@pytest.mark.parametrize("origin", ["http://127.0.0.1:5173", "http://localhost:3000", "http://[::1]:8080",
                                    "https://localhost", "http://LOCALHOST:80"])
async def test_loopback_pages_are_answered_with_cors_headers(serve, origin):
    s = await serve(["Hello."])
    async with httpx.AsyncClient() as client:
        r = await client.post(s.url("/v1/chat/completions"), json=CHAT, headers={"origin": origin})
        assert r.status_code == 200, r.text
        strict.chat_completion(r.json())
        assert r.headers["access-control-allow-origin"] == origin
        assert "Origin" in r.headers["vary"]


async def test_the_servers_own_origin_is_allowed(serve):
    """The dashboard reached under another allowed name (``--allowed-host``) is still the server's own page."""
    s = await serve(["Hello."], allowed_hosts=("box.lan",))
    port = s.base.rsplit(":", 1)[1]
    async with httpx.AsyncClient() as client:
        own = f"http://box.lan:{port}"
        async with client.stream("GET", s.url("/dashboard/events"),
                                 headers={"host": f"box.lan:{port}", "origin": own}) as r:  # the page's feed
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == own
        r = await client.post(s.url("/v1/chat/completions"), json=CHAT,
                              headers={"host": f"box.lan:{port}", "origin": own})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == own
        # the same name on another port is another site
        r = await client.post(s.url("/v1/chat/completions"), json=CHAT,
                              headers={"host": f"box.lan:{port}", "origin": "http://box.lan:1"})
        refused(r, "openai", "http://box.lan:1")


async def test_allowed_origins_from_the_configuration(serve):
    s = await serve(["Hello."], allowed_origins=("https://app.example.com", "http://tool.example:*",
                                                 "vscode-webview://*"))
    async with httpx.AsyncClient() as client:
        for origin in ("https://app.example.com", "https://APP.example.com:443", "http://tool.example:9999",
                       "vscode-webview://1a2b3c4d5e"):
            r = await client.post(s.url("/v1/chat/completions"), json=CHAT, headers={"origin": origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin, origin
        for origin in ("http://app.example.com", "https://app.example.com:8443", "https://tool.example",
                       "vscode-file://1a2b3c4d5e", "null"):
            refused(await client.post(s.url("/v1/chat/completions"), json=CHAT, headers={"origin": origin}),
                    "openai", origin)


async def test_a_preflight_is_answered_for_allowed_origins_only(serve):
    s = await serve(["Hello."], api_key="sesame")
    ask = {"access-control-request-method": "POST",
           "access-control-request-headers": "authorization, content-type, anthropic-version"}
    async with httpx.AsyncClient() as client:
        # the preflight carries no key: it is answered before the key is asked for
        r = await client.options(s.url("/v1/messages"), headers={"origin": "http://localhost:5173", **ask})
        assert r.status_code == 204, r.text
        assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
        assert "POST" in r.headers["access-control-allow-methods"].split(", ")
        assert r.headers["access-control-allow-headers"] == "authorization, content-type, anthropic-version"
        assert int(r.headers["access-control-max-age"]) > 0
        vary = [v.strip().lower() for v in r.headers.get_list("vary") for v in v.split(",")]
        assert sorted(vary) == ["access-control-request-headers", "access-control-request-method", "origin"], vary
        # the request it clears needs the key as ever
        r = await client.post(s.url("/v1/messages"), json={"model": MODEL, "max_tokens": 5, "messages": []},
                              headers={"origin": "http://localhost:5173", "anthropic-version": "2023-06-01"})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "http://localhost:5173"
        assert "access-control-allow-private-network" not in r.headers
        refused(await client.options(s.url("/v1/messages"), headers={"origin": EVIL, **ask}), "anthropic")
        refused(await client.options(s.url("/api/chat"), headers={"origin": EVIL, **ask}), "ollama")
        # OPTIONS that is no preflight is what it was: a method the route does not take
        r = await client.options(s.url("/v1/chat/completions"), headers={"authorization": "Bearer sesame"})
        assert r.status_code == 405


async def test_an_allowed_public_site_may_reach_the_private_server(serve):
    """Chrome's Private Network Access: a public page asks, in its preflight, to reach a loopback server; a site
    the user allowed is told yes, any other is refused."""
    s = await serve(["Hello."], allowed_origins=("https://app.example.com",))
    ask = {"access-control-request-method": "POST", "access-control-request-headers": "content-type",
           "access-control-request-private-network": "true"}
    async with httpx.AsyncClient() as client:
        r = await client.options(s.url("/v1/chat/completions"), headers={"origin": "https://app.example.com", **ask})
        assert r.status_code == 204 and r.headers["access-control-allow-private-network"] == "true"
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        refused(await client.options(s.url("/v1/chat/completions"), headers={"origin": "https://b.example", **ask}),
                "openai", "https://b.example")


@pytest.mark.parametrize("path, envelope", [("/v1/responses", "openai"), ("/v1/chat/completions", "openai"),
                                            ("/v1/messages", "anthropic"), ("/api/chat", "ollama")])
async def test_a_websocket_from_another_origin_is_refused(serve, path, envelope):
    s = await serve(["Hello."])
    async with httpx.AsyncClient() as client:
        r = await client.get(s.url(path), headers=upgrade_headers(origin=EVIL))
        refused(r, envelope)
        assert r.headers["connection"] == "close"


async def test_the_responses_socket_from_another_origin_never_opens(serve):
    s = await serve(["Hello."])
    async with httpx.AsyncClient() as client:
        with pytest.raises(WebSocketUpgradeError) as err:
            async with aconnect_ws(s.url("/v1/responses"), client, headers={"origin": "null"}):
                pass
        assert err.value.response.status_code == 403
        async with aconnect_ws(s.url("/v1/responses"), client, headers={"origin": "http://127.0.0.1:3000"}) as ws:
            await ws.send_text(json.dumps({"type": "response.create", "model": MODEL, "store": False,
                                           "input": "hi"}))
            while (frame := json.loads(await ws.receive_text()))["type"] != "response.completed":
                assert frame["type"] != "error", frame


async def test_raw_requests_with_an_origin(serve):
    """Over a raw socket: the refusal and the answer share one keep-alive connection."""
    s = await serve(["Hello."])
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        await conn.send("POST", "/v1/responses", json.dumps({"model": MODEL, "input": "hi"}).encode(),
                        {"Origin": EVIL, "Content-Type": "text/plain;charset=UTF-8"})
        status, head, raw = await conn.response()
        assert status == 403 and json.loads(raw)["error"]["code"] == "origin_not_allowed"
        await conn.send("GET", "/health", headers={"Origin": "http://localhost:8000"})
        status, head, raw = await conn.response()
        assert status == 200 and head["access-control-allow-origin"] == "http://localhost:8000"


# -- the pieces, without a server ------------------------------------------------------------------------------
def test_the_allow_list_is_checked():
    assert [str(o) for o in allow_list(["https://a.example/", "http://b.example:*, http://c.example:81", "*",
                                        "app://*"])] == \
        ["https://a.example", "http://b.example:*", "http://c.example:81", "*", "app://*"]
    for bad in ("a.example", "http://a.example/path", "http://a.example:99999", "null", "http://*.example",
                "app://**"):
        with pytest.raises(ValueError, match="is not scheme://host"):
            allow_list([bad])
    everyone = OriginPolicy(["*"])
    assert everyone.allows("null", "localhost") and everyone.allows(EVIL, "localhost")


def test_the_flag_and_the_environment_variable(monkeypatch):
    monkeypatch.setenv("TINYTITAN_ALLOWED_ORIGINS", "https://x.example, http://y.example:8080")
    args = build_parser().parse_args(["serve", "--allowed-origin", "https://z.example",
                                      "--allowed-origin", "http://w.example:*"])
    assert allowed_origins(args) == ("https://z.example", "http://w.example:*", "https://x.example",
                                     "http://y.example:8080")
    monkeypatch.setenv("TINYTITAN_ALLOWED_ORIGINS", "evil.example")
    with pytest.raises(SystemExit, match="TINYTITAN_ALLOWED_ORIGINS.*'evil.example' is not scheme://host"):
        allowed_origins(args)


@pytest.mark.parametrize("header, name", [
    ("localhost:8096", "localhost"), ("127.0.0.1", "127.0.0.1"), ("[::1]:8096", "[::1]"), ("[::1]", "[::1]"),
    ("LocalHost", "localhost"), ("::1", "::1"),
    ("[::1]evil.example", "[::1]evil.example"), ("[::1]:80evil", "[::1]:80evil"),
    ("localhost:80:80", "localhost:80:80"),
    ("localhost:x", "localhost:x"), ("localhost@evil.example", "localhost@evil.example"), ("", ""),
    ("localhost evil", "localhost evil"), ("localhost/x", "localhost/x"),
])
def test_the_host_header_is_parsed_strictly(header, name):
    assert host_name(header) == name


@pytest.mark.parametrize("host", ["[::1]evil.example", "[::1]:8096evil", "localhost:1:2", "localhost@evil.example"])
async def test_a_host_with_anything_after_the_name_is_refused(serve, host):
    s = await serve(["Hello."])
    async with httpx.AsyncClient() as client:
        r = await client.post(s.url("/v1/chat/completions"), json=CHAT, headers={"host": host})
        assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed", r.text
