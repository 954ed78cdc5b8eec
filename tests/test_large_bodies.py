"""Large request bodies: parsed and validated on a worker thread (the same refusals as a small body), and the
memory of one given back to the system afterwards (glibc's malloc_trim, at most once per interval)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import trio
import trio.testing

from tinytitan.heap import glibc_trim
from tinytitan.http.trim import Trimmer
from tinytitan.protocols.base import OFF_LOOP_BYTES

MODEL = "tinytitan-scripted"
PAD = "x" * OFF_LOOP_BYTES  # a body with this in it is over the threshold


async def post(s, path, content, headers=None):
    async with httpx.AsyncClient(timeout=60) as c:
        return await c.post(s.url(path), content=content,
                            headers={"content-type": "application/json", **(headers or {})})


def error_of(r):
    body = r.json()
    return r.status_code, body.get("type"), body["error"]


@pytest.mark.parametrize("path,headers,pad", [
    ("/v1/chat/completions", {}, lambda body: {**body, "user": PAD}),
    ("/v1/messages", {"anthropic-version": "2023-06-01"},
     lambda body: {**body, "inference_geo": PAD}),  # (ignored; metadata.user_id is at most 256 characters)
])
async def test_a_large_body_is_refused_as_a_small_one_is(serve, path, headers, pad):
    """Each refusal of a small body comes out of a large one with the same status, envelope, param and code."""
    s = await serve(["ok"])
    base = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    if path == "/v1/messages":
        base["max_tokens"] = 5
    cases = [({**base, "bogus_field": 1}, {**pad(base), "bogus_field": 1}),  # unknown field
             ({**base, "temperature": "hot"}, {**pad(base), "temperature": "hot"}),  # wrong type
             ({**base, "messages": "nope"}, {**pad(base), "messages": "nope"}),  # wrong shape
             ([base], [pad(base)])]  # not an object
    cases = [(json.dumps(a), json.dumps(b)) for a, b in cases]
    cases.append((json.dumps(base)[:-1], json.dumps(pad(base))[:-1]))  # cut short
    huge_int = ', "top_k": ' + "9" * 5000 + "}"  # more digits than int() takes
    cases.append((json.dumps(base)[:-1] + huge_int, json.dumps(pad(base))[:-1] + huge_int))
    for small, big in cases:
        assert len(big) >= OFF_LOOP_BYTES
        rs, rb = await post(s, path, small.encode(), headers), await post(s, path, big.encode(), headers)
        (status, kind, err), (big_status, big_kind, big_err) = error_of(rs), error_of(rb)
        assert 400 <= status < 500 and (big_status, big_kind) == (status, kind), (small[:80], rb.text[:300])
        assert set(big_err) == set(err)
        for key in ("type", "param", "code"):
            assert big_err.get(key) == err.get(key), (key, small[:80])
    assert (await post(s, path, json.dumps(pad(base)).encode(), headers)).status_code == 200


async def test_large_bodies_are_validated_off_the_event_loop(serve):
    s = await serve(["one", "two"])
    proto = s.server.protocols["openai_chat"]
    threads = []
    real = proto.validate
    proto.validate = lambda *a, **k: threads.append(threading.current_thread()) or real(*a, **k)
    small = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    assert (await post(s, "/v1/chat/completions", json.dumps(small).encode())).status_code == 200
    assert (await post(s, "/v1/chat/completions", json.dumps({**small, "user": PAD}).encode())).status_code == 200
    main = threading.main_thread()
    assert threads[0] is main and threads[1] is not main


async def test_a_large_body_trims_the_heap_afterwards(serve):
    """After a large body (answered or refused), the heap is trimmed once on a worker thread; small bodies
    never trim."""
    s = await serve(["one", "two", "three"])
    calls = []
    s.server.trimmer.trim = lambda: calls.append(threading.current_thread())
    s.server.trimmer.delay = 0.0
    small = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    assert (await post(s, "/v1/chat/completions", json.dumps(small).encode())).status_code == 200
    await trio.sleep(0.3)
    assert calls == []
    r = await post(s, "/v1/chat/completions", json.dumps({**small, "bogus": PAD}).encode())
    assert r.status_code == 400
    with trio.fail_after(10):
        while not calls:
            await trio.sleep(0.02)
    assert calls == [calls[0]] and calls[0] is not threading.main_thread()


def test_trims_are_at_most_one_per_interval():
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def main():
        calls = []
        trimmer = Trimmer(lambda: calls.append(clock.current_time()), interval=10.0, delay=0.5)

        async def trims(n):
            while trimmer.count < n:
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            for _ in range(5):  # a burst of large requests: one trim
                trimmer.after_large(nursery)
            await trims(1)
            trimmer.after_large(nursery)  # two more within the interval: one trim, when the interval is up
            trimmer.after_large(nursery)
            await trio.sleep(5)
            assert len(calls) == 1
            await trims(2)
            await trio.sleep(30)
            assert len(calls) == 2 and calls[1] - calls[0] >= 10.0
        assert trimmer.count == 2

    trio.run(main, clock=clock)


def test_glibc_trim_is_callable_where_there_is_glibc():
    trim = glibc_trim()
    if trim is None:
        pytest.skip("no glibc malloc_trim here")
    assert trim() in (0, 1)
    assert Trimmer(trim=lambda: None).trim is not None
