"""HTTP/1.1 connection handling over a raw socket: an answer sent before the request body was read does
not leave the connection hanging, and a client's ``Connection: close`` closes it."""

from __future__ import annotations

import json

import pytest
import trio

import strict
from rawhttp import RawConnection
from tinytitan.http.wire import DRAIN_SECONDS

BIG = b'{"model": "tinytitan-scripted", "input": "' + b"x" * (1 << 20) + b'"}'  # a little over 1 MiB
KEEP_ALIVE = 1.0  # the keep-alive time of these tests' servers (the command line's is serve.KEEP_ALIVE_S)


async def _answer_then_health(conn, method, path, body, headers):
    """Send a request the server answers before reading its body; then, on the same connection, either the
    next request is answered or the server has said it will close the connection and closes it."""
    with trio.fail_after(15):
        await conn.send(method, path, body, headers)
        status, head, raw = await conn.response()
        if status >= 400:
            strict.body(raw)
        if head.get("connection", "").lower() == "close":
            assert await conn.closed()
            return status, None
        await conn.send("GET", "/health", headers={"Host": "localhost"})
        health, _, raw = await conn.response()
        assert health == 200 and json.loads(raw)["status"] == "ok"
        return status, health


@pytest.mark.parametrize("size", [len(BIG), 1000])
@pytest.mark.parametrize("method,path,headers,status", [
    ("POST", "/v1/nope", {}, 404),
    ("POST", "/v1/responses", {"Authorization": "Bearer wrong"}, 401),
    ("POST", "/v1/responses/resp_nothing/cancel", {}, 404),
    ("POST", "/v1/responses", {"Host": "evil.example"}, 403),
])
async def test_an_answer_before_the_body_does_not_hang_the_connection(serve, method, path, headers, status, size):
    s = await serve(["ok"], api_key="key" if "Authorization" in headers else None)
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        got, _ = await _answer_then_health(conn, method, path, BIG[:size] if size < len(BIG) else BIG,
                                           {"Content-Type": "application/json", **headers})
        assert got == status


async def test_a_body_read_whole_keeps_the_connection(serve):
    s = await serve(["ok"])
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        with trio.fail_after(15):
            for _ in range(3):
                await conn.send("POST", "/v1/responses", b'{"model": "tinytitan-scripted", "input": "hi"}',
                                {"Content-Type": "application/json"})
                status, head, raw = await conn.response()
                assert status == 200 and head.get("connection", "").lower() != "close"
                strict.response(raw)


async def test_connection_close_from_the_client_is_honoured(serve):
    s = await serve(["ok"])
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        with trio.fail_after(5):  # not the 75 s keep-alive timeout
            await conn.send("GET", "/health", headers={"Connection": "close"})
            status, _, _ = await conn.response()
            assert status == 200
            assert await conn.closed()


async def test_a_remainder_too_big_to_drain_closes_the_connection(serve):
    """A body far over the drain bound is not read: the answer says Connection: close, and the server
    closes the connection after it (not the 75 s keep-alive timeout)."""
    from tinytitan.http.wire import DRAIN_BYTES

    s = await serve(["ok"])
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        with trio.fail_after(10):
            head = (f"POST /v1/nope HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {2 * DRAIN_BYTES}\r\n\r\n").encode()
            await conn.stream.send_all(head + b"x" * 65536)
            status, headers, raw = await conn.response()
            assert status == 404 and headers["connection"] == "close"
            strict.openai_error(raw)
            assert await conn.closed()


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/v1/models", b""),
    ("POST", "/v1/responses", b'{"model": "tinytitan-scripted", "input": "hi"}'),
    ("POST", "/v1/chat/completions",
     b'{"model": "tinytitan-scripted", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'),
])
async def test_a_client_that_closes_after_its_answer_is_let_go_within_the_keep_alive_time(serve, method, path,
                                                                                         body):
    """curl, a health checker, a script making one connection a request: the client closes once it has read
    the answer. hypercorn holds such a connection until its keep-alive timer ends (http/wire.py): never
    longer (here: ``KEEP_ALIVE`` s)."""
    s = await serve(["ok"], keep_alive_s=KEEP_ALIVE)
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        await conn.send(method, path, body, {"Content-Type": "application/json"} if body else {})
        status, head, _ = await conn.response() if "stream" not in body.decode() else await _streamed(conn)
        assert status == 200
        with trio.fail_after(20):  # the server has finished the request: its record (log line, metrics) is made
            while not answered(s):
                await trio.sleep(0.02)
        await conn.stream.send_eof()
        with trio.fail_after(KEEP_ALIVE + 4):
            assert await conn.closed()


def answered(s) -> float:
    """Requests the server has finished (its ``tinytitan_requests`` counter, moved as each one's record is made)."""
    return sum(sample.value for metric in s.server.observer.metrics.registry.collect()
               if metric.name == "tinytitan_requests" for sample in metric.samples if sample.name.endswith("_total"))


async def _streamed(conn):
    """A chunked event stream read to its last chunk."""
    while b"\r\n0\r\n\r\n" not in conn.buf:
        assert await conn._more()
    head = conn.buf.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    conn.buf = b""
    return int(head[0].split()[1]), {}, b""


@pytest.mark.parametrize("path,headers,kind", [
    ("/v1/chat/completions", {}, "invalid_request_error"),
    ("/v1/messages", {"anthropic-version": "2023-06-01"}, "invalid_request_error"),
    ("/api/chat", {}, None),
])
async def test_a_body_that_stops_arriving_is_refused_and_its_connection_closed(serve, path, headers, kind):
    """A client that sends its headers and part of its body, then nothing (it hung; a slowloris): without a
    bound its connection was held for ever. Each byte restarts the wait, so a slow body is still read."""
    s = await serve(["ok"], body_idle_seconds=1.0, keep_alive_s=KEEP_ALIVE)
    body = (b'{"model": "tinytitan-scripted", ' + (b'"stream": false, ' if kind is None else b'"max_tokens": 8, ')
            + b'"messages": [{"role": "user", "content": "hi"}]}')
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        with trio.fail_after(15):
            head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "localhost", "Content-Type": "application/json",
                                                          "Content-Length": str(len(body)), **headers}.items())
            await conn.stream.send_all(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode())
            for i in range(0, 80, 10):  # slower than nothing, each pause well within the bound (a busy machine
                # overruns a sleep), all of them past it: read whole
                await conn.stream.send_all(body[i:i + 10])
                await trio.sleep(0.3)
            with trio.fail_after(DRAIN_SECONDS - 1):  # at once: the rest of a stalled body is not waited for
                status, got, raw = await conn.response()
            assert status in (400, 408) and got["connection"] == "close", raw
            err = json.loads(raw)
            if kind:
                assert err["error"]["type"] == kind and "stopped arriving" in err["error"]["message"]
                strict.body(raw) if path.startswith("/v1/chat") else strict.anthropic_error(raw)
                if path == "/v1/messages":  # the API's own reason (its RequestBodyTimeoutError)
                    assert err["error"]["details"] == {"error_code": "request_body_timeout"}
            else:
                assert "stopped arriving" in err["error"]
            assert await conn.closed()
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        with trio.fail_after(15):
            await conn.send("POST", path, body, {"Content-Type": "application/json", **headers})
            head = (await conn.response())[:2]
            assert head[0] == 200


async def test_a_body_declared_over_the_limit_is_refused_at_once(serve):
    """A Content-Length over max_body_bytes is answered 413 without waiting for (or reading) that body, not
    with request_timeout once the client, expecting the refusal, stops sending."""
    s = await serve(["ok"], max_body_bytes=1000)
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        await conn.stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                                   b"application/json\r\nContent-Length: 50000000\r\n\r\n{" + b" " * 5000)
        with trio.fail_after(5):
            status, head, raw = await conn.response()
        assert status == 413 and head["connection"] == "close", raw
        strict.openai_error(raw)


async def test_a_chunked_body_past_the_limit_is_refused_at_once(serve):
    s = await serve(["ok"], max_body_bytes=1000)
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        await conn.stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                                   b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + b" " * 5000
                                   + b"\r\n")
        with trio.fail_after(9):  # (the 5 s wait for the rest of a body answered before it was read)
            status, head, raw = await conn.response()
        assert status == 413, raw
        strict.openai_error(raw)


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/health", b""),
    ("POST", "/v1/responses", b'{"model": "tinytitan-scripted", "input": "hi"}'),
])
async def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(serve, method, path, body):
    """A client that keeps its connection after an answer and sends nothing more (a pool, a laptop that slept,
    a slowloris of one request each) has it closed once the keep-alive time passes (here: ``KEEP_ALIVE`` s)."""
    s = await serve(["ok"], keep_alive_s=KEEP_ALIVE)
    conn = await RawConnection.open(s.base)
    async with conn.stream:
        await conn.send(method, path, body, {"Content-Type": "application/json"} if body else {})
        status, _, _ = await conn.response()
        assert status == 200
        with trio.fail_after(KEEP_ALIVE + 4):
            assert await conn.closed()


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_longer_than_the_keep_alive_time_is_not_cut(serve, stream):
    """The client sends nothing while its answer is made: an answer taking longer than the keep-alive time
    (1.8 s against ``KEEP_ALIVE``), streamed or whole, arrives in full, and the connection then serves the next
    request."""
    s = await serve([{"output": "slow " * 30, "delay_ms": 60}, "ok"], keep_alive_s=KEEP_ALIVE)
    conn = await RawConnection.open(s.base)
    body = (b'{"model": "tinytitan-scripted", "stream": %s, "messages": [{"role": "user", "content": "hi"}]}'
            % (b"true" if stream else b"false"))
    async with conn.stream:
        with trio.fail_after(30):
            await conn.send("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            if stream:
                status, _, _ = await _streamed(conn)
            else:
                status, _, raw = await conn.response()
                assert json.loads(raw)["choices"][0]["message"]["content"].count("slow") == 30
            assert status == 200
            await conn.send("GET", "/health")
            assert (await conn.response())[0] == 200
