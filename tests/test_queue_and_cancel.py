"""Bounded admission and cancellation, over real sockets."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

from backends import FailsToLoad
from observe_helpers import scrape
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.engine import Engine
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.errors import ApiError
from tinytitan.http.app import Server, ServerConfig, request_scope
from tinytitan.protocols.registry import all_protocols
from tinytitan.protocols.wire import Call

MODEL = "tinytitan-scripted"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
LONG = " ".join(f"word{i}" for i in range(400))


async def test_overflow_is_refused_at_once(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20)], demo_tok)
    s = await serve(backend=backend, max_queue=1)
    async with httpx.AsyncClient(timeout=30) as c:
        async with trio.open_nursery() as n:
            async def hold():
                async with c.stream("POST", s.url("/v1/chat/completions"), json={**BODY, "stream": True}) as r:
                    async for _ in r.aiter_bytes():
                        await trio.sleep_forever()  # hold the slot until the test ends

            n.start_soon(hold)
            while s.engine.running == 0:
                await trio.sleep(0.01)
            async def queued():
                await c.post(s.url("/v1/chat/completions"), json=BODY)

            n.start_soon(queued)  # waits in the queue
            while s.engine.waiting == 0:
                await trio.sleep(0.01)
            with trio.fail_after(5):  # at once: queued, it would wait out the held stream's 8 s and more of decoding
                r = await c.post(s.url("/v1/chat/completions"), json=BODY)
            assert r.status_code == 429 and r.headers["retry-after"] == "1"  # declared in the spec's error kind
            err = r.json()["error"]
            assert err["code"] == "queue_full" and "--max-queue" in err["message"]
            health = (await c.get(s.url("/health"))).json()
            assert health["queue_depth"] == 1
            n.cancel_scope.cancel()


async def test_client_hangup_cancels_generation(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=30), ScriptEntry("after")], demo_tok)
    s = await serve(backend=backend)
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream("POST", s.url("/v1/chat/completions"), json={**BODY, "stream": True}) as r:
            got = 0
            async for line in r.aiter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    got += 1
                    if got == 3:
                        break
        # the response is closed: the server must notice, stop decoding and free the slot
        with trio.fail_after(5):
            while s.engine.running or s.engine.waiting:
                await trio.sleep(0.02)
        stopped_at = backend.tokens_decoded
        await trio.sleep(0.3)  # ten tokens' time: nothing more may be decoded
        assert backend.tokens_decoded == stopped_at
        assert stopped_at < 20  # it stopped within a token or two of the hang-up, not at the end (≈800 tokens)
        # and the slot really is free: the next request is answered
        r = await c.post(s.url("/v1/chat/completions"), json=BODY)
        assert r.json()["choices"][0]["message"]["content"] == "after"


async def test_requests_are_served_in_order(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry("first", delay_ms=20), ScriptEntry("second"), ScriptEntry("third")],
                              demo_tok)
    s = await serve(backend=backend, max_queue=4)
    results = []
    async with httpx.AsyncClient(timeout=30) as c:
        async with trio.open_nursery() as n:
            async def one(tag):
                r = await c.post(s.url("/v1/chat/completions"), json=BODY)
                results.append((tag, r.json()["choices"][0]["message"]["content"]))

            for tag in range(3):  # each sent once the one before has started (on a loaded machine, sends 50 ms
                n.start_soon(one, tag)  # apart could be prepared in either order)
                with trio.fail_after(10):
                    while backend.started < tag + 1:
                        await trio.sleep(0.005)
    assert sorted(results) == [(0, "first"), (1, "second"), (2, "third")]


async def test_client_hangup_cancels_a_non_streaming_generation(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=30), ScriptEntry("after")], demo_tok)
    s = await serve(backend=backend)
    async with httpx.AsyncClient(timeout=0.5) as c:
        try:
            await c.post(s.url("/v1/chat/completions"), json=BODY)
        except httpx.ReadTimeout:
            pass  # the client gave up and closed the connection
    with trio.fail_after(5):
        while s.engine.running or s.engine.waiting:
            await trio.sleep(0.02)
    stopped_at = backend.tokens_decoded
    await trio.sleep(0.3)
    assert backend.tokens_decoded == stopped_at < 40


STREAMS = {
    "openai_chat": {**BODY, "stream": True},
    "openai_responses": {"model": MODEL, "input": "hi", "stream": True},
    "anthropic_messages": {**BODY, "max_tokens": 4000, "stream": True},
}


@asynccontextmanager
async def stream_response(backend, protocol: str, max_queue: int):
    """A streaming request answered in-process, without HTTP, inside the request scope the HTTP layer gives
    each request: the server and quart's response, unsent."""
    server = Server(Engine(backend, max_queue=max_queue), all_protocols(), ServerConfig())
    call = Call("POST", "/", {}, {}, json.dumps(STREAMS[protocol]).encode())
    async with request_scope():
        yield server, server.write(await server.protocols[protocol].generate(call))


@pytest.mark.parametrize("protocol", sorted(STREAMS))
async def test_a_closed_stream_frees_its_slot_at_once(protocol, demo_tok):
    """A server closes the body of a stream whose client hung up from the task that sent it (quart does), then
    the request ends. The slot and the decoding thread must be freed by then: left to the garbage collector,
    they would be freed late and from another task (once that wedged the queue for good)."""
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=5)], demo_tok)
    async with stream_response(backend, protocol, max_queue=0) as (server, resp):
        async with resp.response as body:
            chunks = aiter(body)
            for _ in range(4):
                await anext(chunks)
            assert server.engine.running == 1
    assert (server.engine.running, server.engine.waiting, server.engine.admission.slots.value) == (0, 0, 1)
    stopped_at = backend.tokens_decoded
    await trio.sleep(0.1)
    assert backend.tokens_decoded == stopped_at < 40  # the decoding thread stopped with the stream


@pytest.mark.parametrize("protocol", sorted(STREAMS))
async def test_a_stream_closed_before_its_first_event_gives_its_place_back(protocol, demo_tok):
    """A client that hangs up at once: the server closes a body it never started, and the request ends."""
    async with stream_response(ScriptedBackend([ScriptEntry("hello")], demo_tok), protocol, 1) as (server, resp):
        assert server.engine.waiting + server.engine.running == 1  # its place is taken (decoding may have begun)
        async with resp.response:
            pass  # closed unstarted
    assert (server.engine.waiting, server.engine.running) == (0, 0)


async def test_a_stream_dropped_unsent_gives_its_place_back(demo_tok):
    """A response the server never started to send (the client was gone first): the request's end is enough."""
    async with stream_response(ScriptedBackend([ScriptEntry("hello")], demo_tok), "openai_chat", 1) as (server, _):
        assert server.engine.waiting + server.engine.running == 1  # its place is taken (decoding may have begun)
    assert (server.engine.waiting, server.engine.running) == (0, 0)


async def test_a_session_refused_or_failing_to_tokenize_takes_no_place(demo_tok):
    """Admission comes before tokenizing, and a prompt that cannot be tokenized gives its place back at once."""
    engine = Engine(ScriptedBackend([ScriptEntry("hello")], demo_tok, context_window=64), max_queue=0)
    req = ChatRequest(model=MODEL, messages=(Message("user", LONG),))
    with pytest.raises(ApiError) as err:
        async with engine.session(req):
            pass
    assert err.value.code == "context_length_exceeded" and (engine.waiting, engine.running) == (0, 0)
    ok = ChatRequest(model=MODEL, messages=(Message("user", "hi"),))
    async with engine.session(ok) as held:
        with pytest.raises(ApiError) as err:  # the queue is full: refused before anything is tokenized
            async with engine.session(req):
                pass
        assert err.value.code == "queue_full"
        assert [type(ev).__name__ async for ev in held][-1] == "Finished"
    assert (engine.waiting, engine.running, engine.admission.slots.value) == (0, 0, 1)


async def test_clients_that_hang_up_at_once_leave_no_place_taken(serve, demo_tok):
    """Whenever the hang-up lands (before the handler answers, or before the body starts), the place is
    given back by the end of the request."""
    backend = ScriptedBackend([ScriptEntry("after")], demo_tok)
    s = await serve(backend=backend, max_queue=2)
    body = json.dumps({**BODY, "stream": True}).encode()
    host, port = s.base.removeprefix("http://").split(":")
    for _ in range(6):
        sock = await trio.open_tcp_stream(host, int(port))
        await sock.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await sock.aclose()
    with trio.fail_after(20):  # the server reads each request, admits it, then finds its client gone: it ends
        while await answered(s, "/v1/chat/completions") < 6:
            await trio.sleep(0.02)
    assert (s.engine.running, s.engine.waiting) == (0, 0)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json=BODY)
    assert r.json()["choices"][0]["message"]["content"] == "after"


async def answered(s, route: str) -> float:
    """The requests to ``route`` that have ended (answered, refused, or their client gone), as /metrics counts."""
    return sum(value for (name, labels), value in (await scrape(s)).items()
               if name == "tinytitan_requests_total" and ("route", route) in labels)


@pytest.mark.parametrize("protocol", sorted(STREAMS))
async def test_a_model_that_fails_to_load_ends_the_open_stream_in_the_protocols_own_way(serve, demo_tok, protocol):
    s = await serve(backend=FailsToLoad([ScriptEntry("never")], demo_tok))
    path = {"openai_chat": "/v1/chat/completions", "openai_responses": "/v1/responses",
            "anthropic_messages": "/v1/messages"}[protocol]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json=STREAMS[protocol], headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200  # the stream was open before the model was needed
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    assert blocks and "weights missing" in r.text
    if protocol == "openai_chat":
        assert blocks[-1] == "data: [DONE]" and '"error"' in blocks[-2]
    elif protocol == "openai_responses":
        assert blocks[-1].startswith("event: response.failed")
    else:
        assert blocks[-1].startswith("event: error")
    assert (s.engine.running, s.engine.waiting) == (0, 0)


async def test_the_first_token_is_not_held_back_by_delta_batching(demo_tok):
    """Deltas go out at most every stream interval after the first; Started (sent before any token) must not
    start that interval, or every answer's first token waits it out (time to first token + 50 ms)."""
    from tinytitan.events import Started, TextDelta

    # an interval far longer than the test may take
    engine = Engine(ScriptedBackend([ScriptEntry("one two three", delay_ms=100)], demo_tok), stream_interval=30.0)
    req = ChatRequest(model=engine.model_id, messages=(Message("user", "hi"),))
    seen = []
    with trio.fail_after(10):
        async with engine.session(req) as events:
            async for ev in events:
                seen.append(type(ev))
                if isinstance(ev, TextDelta):
                    break
    assert seen[0] is Started and seen[-1] is TextDelta


async def test_an_ending_cuts_the_pause_between_batches_short(demo_tok):
    """After the first delta the session waits out the batch interval, but not past the generation's end: the
    last tokens go out with Finished at once (else every answer ends up to an interval late)."""
    from tinytitan.events import Finished, Started, TextDelta

    # an interval far longer than the test may take
    engine = Engine(ScriptedBackend([ScriptEntry("one two three four", delay_ms=20)], demo_tok), stream_interval=30.0)
    req = ChatRequest(model=engine.model_id, messages=(Message("user", "hi"),))
    seen = []
    with trio.fail_after(10):
        async with engine.session(req) as events:
            seen = [ev async for ev in events]
    kinds = [type(ev) for ev in seen]
    assert kinds == [Started, TextDelta, TextDelta, Finished]  # the first at once, the rest when it ended
    assert "".join(ev.text for ev in seen if isinstance(ev, TextDelta)) == "one two three four"


@pytest.mark.parametrize("streamed", [True, False])
async def test_the_model_thread_wakes_the_consumer_only_while_it_waits(demo_tok, monkeypatch, streamed):
    """Tokens that arrive while the consumer pauses between batches wake nothing (it drains them when the pause
    ends); a consumer that folds the whole answer (no stream) pauses far longer, so its events come in a few
    batches: a token costs the event loop no wake-up of its own."""
    from tinytitan.engine import session as session_module
    from tinytitan.events import TextDelta

    wakes = []
    real_wake = session_module.Mailbox._wake

    def counted(self):
        wakes.append(1)
        real_wake(self)

    monkeypatch.setattr(session_module.Mailbox, "_wake", counted)
    text = " ".join(f"w{i}" for i in range(30))
    engine = Engine(ScriptedBackend([ScriptEntry(text, delay_ms=20)], demo_tok), stream_interval=0.2)
    engine.folded_interval = 30.0
    req = ChatRequest(model=engine.model_id, messages=(Message("user", "hi"),))
    with trio.fail_after(20):
        async with engine.session(req, streamed=streamed) as events:
            seen = [ev async for ev in events]
    deltas = [ev for ev in seen if isinstance(ev, TextDelta)]
    assert "".join(ev.text for ev in deltas) == text
    tokens = len(demo_tok.encode(text, add_special_tokens=False))
    assert tokens >= 30
    # a wake for Started, one a batch, one for the ending (the old mailbox woke the consumer for every token)
    if streamed:  # tokens 20 ms apart, batches 200 ms apart
        assert 3 <= len(deltas) < tokens / 4 and len(wakes) <= len(deltas) + 3, (tokens, len(deltas), len(wakes))
    else:  # the first delta, then the rest when the generation ended
        assert len(deltas) == 2 and len(wakes) <= 5, (len(deltas), len(wakes))


async def test_an_answers_last_text_goes_out_before_its_row_is_retired(demo_tok, monkeypatch):
    """A row that ends has its held deltas sent before the work of retiring it (keeping its cache for the next
    turn, then its Finished): with rows ending together that work is serial, and the last text of each
    answer waited for every row before it (8 streams: 0.1-0.3 s)."""
    import threading

    from tinytitan.engine.decode import rows
    from tinytitan.events import Finished, TextDelta

    seen = threading.Event()
    real_end = rows.Row.end

    def end(self, kv=None, like=None):  # the retiring work waits until the consumer has the answer's text
        assert seen.wait(10), "the answer's text was held until its row was retired"
        return real_end(self, kv, like)

    monkeypatch.setattr(rows.Row, "end", end)
    engine = Engine(ScriptedBackend([ScriptEntry("one two three four five", delay_ms=20)], demo_tok),
                    stream_interval=30.0)  # after the first delta, the rest is held
    req = ChatRequest(model=engine.model_id, messages=(Message("user", "hi"),))
    text, kinds = "", []
    with trio.fail_after(20):
        async with engine.session(req) as events:
            async for ev in events:
                kinds.append(type(ev))
                if isinstance(ev, TextDelta):
                    text += ev.text
                    if "four" in text:
                        seen.set()
    assert kinds[-1] is Finished and text == "one two three four five"


async def test_wind_down_ends_every_open_generation_in_band(demo_tok):
    """The server stops: a generation decoding past the grace and one waiting in the queue each end with a
    Failed (their streams' error event, their folded answers' 503); one asked for after it is refused at once with
    that error (nothing was sent: a 503 whether streamed or not), and every place is given back."""
    from tinytitan.events import Failed, Finished

    engine = Engine(ScriptedBackend([ScriptEntry(LONG, delay_ms=20)], demo_tok), max_queue=4)
    req = ChatRequest(model=MODEL, messages=(Message("user", "hi"),))
    got: dict = {}
    started = trio.Event()

    async def one(name):
        async with engine.session(req) as events:
            got[name] = []
            async for ev in events:
                got[name].append(ev)
                started.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as n:
            n.start_soon(one, "decoding")
            await started.wait()
            n.start_soon(one, "queued")
            while engine.waiting == 0:
                await trio.sleep(0.01)
            await engine.wind_down(0.05)
            with pytest.raises(ApiError) as refused:
                await one("after")
    assert (refused.value.kind, refused.value.code) == ("unavailable", "server_shutting_down")
    for name in ("decoding", "queued"):
        last = got[name][-1]
        assert isinstance(last, Failed) and (last.type, last.code) == ("unavailable", "server_shutting_down"), name
        assert not any(isinstance(ev, Finished) for ev in got[name]), name
    assert (engine.running, engine.waiting, engine.admission.slots.value, engine.sessions) == (0, 0, 1, set())
