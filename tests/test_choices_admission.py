"""Admitting a request's several choices (OpenAI's ``n``, several prompts): as a unit, refused before its stream
opens where the queue cannot hold them now (429, retry), and as the client's error where the server never could
(400 naming the field: a retry would never fit); once admitted, none of its sessions is refused."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
import trio

from tinytitan.engine.admission import Capacity
from tinytitan.errors import ApiError
from tinytitan.protocols.choices import refuse_past_capacity

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


async def another_stream(c: httpx.AsyncClient, s) -> None:
    """Another client's request, streamed to its end: it holds a decode slot, or waits for one, meanwhile."""
    async with c.stream("POST", s.url("/v1/completions"), json={"model": MODEL, "prompt": "x", "stream": True}) as r:
        async for _ in r.aiter_bytes():
            pass


def holding_first(s) -> trio.Event:
    """The engine's preparing of a prompt "first" waits until the event returned is set (the request's first
    choice takes its time); every other prompt is prepared at once."""
    prepare, go = s.engine.prepare, trio.Event()

    async def held(req):
        if req.prompt == "first":
            await go.wait()
        return await prepare(req)

    s.engine.prepare = held
    return go


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("path, body", [("/v1/chat/completions", {"messages": USER}),
                                        ("/v1/completions", {"prompt": "hi"})])
async def test_a_request_whose_choices_the_queue_cannot_hold_now_is_refused_before_its_stream(
        serve, path, body, stream):
    """Streamed or folded: refused before any of its choices ran (a folded one's too, not after its first)."""
    s = await serve([{"output": "word " * 200, "delay_ms": 20}, "one two three"], max_queue=2)
    n = s.engine.capacity.most  # (fits an idle server; with one request decoding, the rest would wait past the queue)
    async with httpx.AsyncClient(timeout=30) as c, trio.open_nursery() as nursery:
        nursery.start_soon(another_stream, c, s)
        while s.engine.health()["running"] == 0:
            await trio.sleep(0.01)
        r = await c.post(s.url(path), json={"model": MODEL, **body, "n": n, "stream": stream})
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full", r.text
        assert f"this request's {n} choices do not all fit" in r.json()["error"]["message"]
        assert s.engine.waiting == 0  # (the refused unit took no place, nor holds one)
        nursery.cancel_scope.cancel()
    async with httpx.AsyncClient(timeout=30) as c:
        with trio.fail_after(20):  # (the cancelled stream's place is given back as its session ends)
            while s.engine.health()["running"]:
                await trio.sleep(0.05)
        fits = await c.post(s.url(path), json={"model": MODEL, **body, "n": n, "stream": stream})
        assert fits.status_code == 200 and "queue_full" not in fits.text, fits.text
        assert fits.text.endswith("data: [DONE]\n\n") if stream else len(fits.json()["choices"]) == n
    await settled(s)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path, body, n, param", [
    ("/v1/chat/completions", {"messages": USER}, 4, "n"), ("/v1/completions", {"prompt": "hi"}, 4, "n"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 2, "n"), ("/v1/completions", {"prompt": ["a", "b", "c", "d"]}, 1,
                                                          "prompt")])
async def test_more_choices_than_the_server_ever_holds_are_the_clients_error_naming_the_field(
        serve, path, body, n, param, stream):
    """Past its decode slots and --max-queue together, a request's choices never fit, however long a client
    retries: a 400 naming the field and the most this server takes, not a 429 that is retried for ever."""
    s = await serve(["one two three"], max_queue=2)
    assert s.engine.capacity == Capacity(decoding=1, waiting=2)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json={"model": MODEL, **body, **({"n": n} if n > 1 else {}), "stream": stream})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == param and error["code"] == "invalid_value", r.text
    assert "at most 3 choices" in error["message"] and "retry" not in error["message"], error
    assert "(3: 1 decoding and --max-queue 2 waiting)" in error["message"], error
    assert s.engine.health()["running"] == 0 and s.engine.health()["waiting"] == 0


def test_the_refusal_words_the_bound_it_checked_and_its_parts_from_one_value():
    """The sentence's total and its parts are the engine's one ``Capacity``, whatever else an engine (a layer
    around it, a group's lead) says of its batch and queue: the numbers it gives always add up."""
    engine = SimpleNamespace(capacity=Capacity(decoding=2, waiting=5), max_batch=8, max_queue=16)
    with pytest.raises(ApiError) as refused:
        refuse_past_capacity(SimpleNamespace(engine=engine), SimpleNamespace(body={"n": 8}), [None] * 8)
    assert refused.value.param == "n" and refused.value.code == "invalid_value"
    assert refused.value.message == ("'n' is 8: 8 choices, more than this server can ever take at once (7: 2 decoding "
                                     "and --max-queue 5 waiting); ask for at most 7 choices in one request")
    refuse_past_capacity(SimpleNamespace(engine=engine), SimpleNamespace(body={"n": 7}), [None] * 7)  # (it fits)


async def test_a_streams_later_prompts_are_never_refused_once_its_choices_were_admitted(serve):
    """Several prompts, streamed: the first prompt's session is admitted for every choice; requests that arrive
    while it is prepared fill what is left of the queue, and the later prompts' sessions (of a request already
    admitted) are not then refused: the request was admitted, its answer is not a 429."""
    s = await serve([{"output": "word " * 200, "delay_ms": 20}], max_queue=2)
    go = holding_first(s)  # the first prompt's preparing takes its time
    async with httpx.AsyncClient(timeout=30) as c, trio.open_nursery() as nursery:
        statuses = []

        async def ours():
            async with c.stream("POST", s.url("/v1/completions"), json={
                    "model": MODEL, "prompt": ["first", "second"], "max_tokens": 4, "stream": True}) as r:
                statuses.append(r.status_code)

        nursery.start_soon(ours)
        while s.engine.waiting == 0:
            await trio.sleep(0.01)
        nursery.start_soon(another_stream, c, s)  # one decodes, one waits: the queue holds no more beside ours
        while s.engine.health()["running"] == 0:
            await trio.sleep(0.01)
        nursery.start_soon(another_stream, c, s)
        while s.engine.health()["waiting"] < 2:
            await trio.sleep(0.01)
        go.set()
        while not statuses:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert statuses == [200]



async def test_a_folded_requests_later_choices_are_never_refused_once_its_first_was_admitted(serve):
    """Not streamed, n=2: the request is admitted for both choices when its first is, which fills the queue; a
    request that arrives while the first reads the prompt is refused, and the second choice (opened once the first
    has read it) is not: the first choice's work is not wasted, the answer is not a 429."""
    s = await serve([{"output": "one two", "delay_ms": 300}], max_queue=1)
    async with httpx.AsyncClient(timeout=30) as c, trio.open_nursery() as nursery:
        answers = []

        async def ours():
            answers.append(await c.post(s.url("/v1/chat/completions"), json={
                "model": MODEL, "messages": USER, "n": 2}))

        nursery.start_soon(ours)
        while s.engine.health()["running"] == 0:
            await trio.sleep(0.01)

        other = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "x"})
        while not answers:
            await trio.sleep(0.01)
    assert other.status_code == 429, other.text  # (the queue, --max-queue 1, holds our second choice's place)
    assert answers[0].status_code == 200, answers[0].text
    assert [c["index"] for c in answers[0].json()["choices"]] == [0, 1]


def test_a_unit_takes_all_its_places_at_admission_and_gives_back_those_none_took():
    """The first of a unit's generations takes every place of it: no other request is admitted into them; each
    later one takes a held place (never refused, nothing counted twice); the request's end gives the rest back.
    A memory round (``continuing``) is never refused, a unit's held places or not."""
    from tinytitan.engine.admission import Admission, Unit

    admission = Admission(1, max_queue=2)
    unit = Unit(3)
    first = admission.admit(unit=unit)
    assert admission.waiting == 3  # its own place and the two it holds
    with pytest.raises(ApiError) as refused:  # one slot free, three waiting for it: two beyond it, the queue's all
        admission.admit()
    assert refused.value.code == "queue_full"
    second = admission.admit(unit=unit)  # (a held place: the queue's count stays)
    assert admission.waiting == 3 and unit.held == 1
    admission.admit(continuing=True).give_back()  # a memory round of an admitted request still waits its turn
    admission.release(unit)  # the request ended before its third choice opened
    assert admission.waiting == 2 and unit.held == 0
    admission.release(unit)  # (once)
    assert admission.waiting == 2
    late = admission.admit(unit=unit)  # one after the release waits as a further round would, never refused
    for place in (first, second, late):
        place.give_back()
    assert (admission.waiting, admission.running, admission.slots.value) == (0, 0, 1)


async def settled(s) -> None:
    """Until the engine holds no place, running or waiting (each is given back as its session ends)."""
    with trio.fail_after(20):
        while (s.engine.running, s.engine.waiting) != (0, 0):
            await trio.sleep(0.02)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("body", [{"prompt": "first", "n": 2}, {"prompt": ["first", "second"]}])
async def test_a_request_arriving_before_a_units_later_choices_open_finds_their_places_taken(serve, body, stream):
    """The queue holds our request's two choices and nothing more (one slot, --max-queue 1): while its first is
    prepared (its later choice not opened yet), another request is refused, not admitted into the place the
    later choice will take; ours is answered in full, and every place goes back."""
    s = await serve(["one two"], max_queue=1)
    go = holding_first(s)  # our first choice's preparing takes its time
    async with httpx.AsyncClient(timeout=30) as c, trio.open_nursery() as nursery:
        answers = []

        async def ours():
            answers.append(await c.post(s.url("/v1/completions"), json={"model": MODEL, **body, "stream": stream}))

        nursery.start_soon(ours)
        while s.engine.waiting == 0:
            await trio.sleep(0.01)
        other = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "x"})
        go.set()
        while not answers:
            await trio.sleep(0.01)
    assert other.status_code == 429 and other.json()["error"]["code"] == "queue_full", other.text
    assert answers[0].status_code == 200, answers[0].text
    if stream:
        assert answers[0].text.endswith("data: [DONE]\n\n") and "error" not in answers[0].text
    else:
        assert [c["index"] for c in answers[0].json()["choices"]] == [0, 1]
    await settled(s)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_units_places_all_go_back_when_a_choice_fails(serve, stream):
    """Our first choice fails as it reads its prompt, before the later one opened: the answer is that error and
    the place held for the later choice goes back with the request (the server then takes a full queue again)."""
    s = await serve([{"output": "cut", "error": "the model broke"}, "one two"], max_queue=1)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "hi", "n": 2, "stream": stream})
        assert "the model broke" in r.text
        await settled(s)
        again = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "hi", "n": 2})
    assert again.status_code == 200, again.text
    await settled(s)


@pytest.mark.parametrize("opened", [True, False])
async def test_a_units_places_all_go_back_when_its_client_hangs_up(serve, opened):
    """A streamed unit whose client leaves, after the later choices opened or before (its first still preparing):
    no place it took or held stays taken."""
    s = await serve([{"output": "word " * 400, "delay_ms": 20}], max_queue=2)
    if not opened:
        holding_first(s)  # (never let go: the client hangs up while its first choice is prepared)
    async with httpx.AsyncClient(timeout=30) as c:
        with trio.move_on_after(30) as waited:
            async with trio.open_nursery() as nursery:
                async def ours():
                    async with c.stream("POST", s.url("/v1/completions"), json={
                            "model": MODEL, "prompt": "first", "n": 3, "stream": True}) as r:
                        async for _ in r.aiter_bytes():
                            nursery.cancel_scope.cancel()  # hang up at the first bytes

                nursery.start_soon(ours)
                if not opened:
                    while s.engine.waiting < 3:  # its first place and the two it holds
                        await trio.sleep(0.01)
                    nursery.cancel_scope.cancel()  # hang up before anything was sent
        assert not waited.cancelled_caught
    await settled(s)


async def test_once_the_server_stops_a_units_later_choice_ends_in_band_and_a_new_request_is_refused(demo_backend):
    """Whether a generation may be refused is answered once (``Admission.refusable``), for a full queue and for a
    server that stopped alike: a request's first is refused (503), a later choice of a request already admitted is
    not, and ends with that failure in-band instead, in the place its unit held."""
    from tinytitan.chat_request import ChatRequest
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Failed

    engine = Engine(demo_backend, max_queue=2)
    req = ChatRequest(model=demo_backend.model_id, messages=(), prompt="Stopping", max_tokens=2, temperature=0,
                      response_id="cmpl-stopping")
    unit = engine.unit(2, req.response_id)
    async with engine.session(req, unit=unit):  # (admitted: its later choice's place held)
        await engine.wind_down(0)
        with pytest.raises(ApiError) as refused:  # a new request's first choice
            async with engine.session(req, unit=engine.unit(2, "cmpl-after")):
                pass
        assert refused.value.code == "server_shutting_down"
        async with engine.session(req, unit=unit) as later:
            events = [ev async for ev in later]
        assert isinstance(events[-1], Failed) and events[-1].code == "server_shutting_down", events
    engine.end_unit(unit)
    assert (engine.waiting, engine.running) == (0, 0)


async def test_health_and_metrics_count_the_places_a_unit_holds_as_waiting_generations(serve):
    """A request of three choices, its first still being prepared (no choice decodes, the later two not opened):
    /health and /metrics show three generations waiting, the number --max-queue bounds, and a request refused then
    is told that what waits counts each choice, not three requests (docs/operating.md says the same)."""
    s = await serve(["one two"], max_queue=2)
    go = holding_first(s)
    async with httpx.AsyncClient(timeout=30) as c, trio.open_nursery() as nursery:
        answers = []

        async def ours():
            answers.append(await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "first", "n": 3}))

        nursery.start_soon(ours)
        while s.engine.waiting == 0:
            await trio.sleep(0.01)
        health = (await c.get(s.url("/health"))).json()
        assert (health["waiting"], health["queue_depth"], health["running"]) == (3, 3, 0), health
        metrics = (await c.get(s.url("/metrics"))).text
        assert "\ntinytitan_queue_waiting 3.0\n" in metrics and "\ntinytitan_queue_running 0.0\n" in metrics
        other = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "x"})
        assert other.status_code == 429, other.text
        assert other.json()["error"]["message"].startswith(
            "The server is busy: 3 generations are already waiting (--max-queue 2; each choice of a request counts)")
        go.set()
        while not answers:
            await trio.sleep(0.01)
    assert [c["index"] for c in answers[0].json()["choices"]] == [0, 1, 2]
    await settled(s)
