"""The prompt a request's first choice hands to its others where the prompt cache will not hold it
(cache/handoff.py): each engine's own, and gone once its request ends, however it ended."""

from __future__ import annotations

import functools

import httpx
import openai
import pytest
import trio

from tinytitan.chat_request import ChatRequest
from tinytitan.engine.engine import Engine


def cache_off(backend, monkeypatch) -> None:
    """``--prompt-cache-mib 0``: a shared prompt's checkpoint is handed on, never kept."""
    monkeypatch.setattr(backend.prompt_cache, "max_bytes", 0)
    backend.prompt_cache.clear()  # (what earlier tests left, a budget of 0 would not have held)


async def cached_at_start(engine: Engine, req: ChatRequest) -> tuple[int, int]:
    """(the prompt's tokens, how many its row started with) for one session of ``req`` on ``engine``."""
    async with engine.session(req) as session:
        events = [ev async for ev in session]
    return events[0].prompt_tokens, events[0].cached_tokens


async def test_two_engines_in_one_process_never_see_each_others_hand_offs(demo_backend, monkeypatch):
    """Two servers in one process (tests build many over one backend) whose requests carry the same id: a row of
    one never starts from the prompt the other's request handed on (before, one process-wide hand-off served it
    to both), while a further choice of the request on its own engine still does."""
    cache_off(demo_backend, monkeypatch)
    req = ChatRequest(model=demo_backend.model_id, messages=(), prompt="Two engines, one id: " + "the dog sleeps " * 6,
                      max_tokens=2, temperature=0, shared_prompt=True, response_id="cmpl-the-same-id")
    one, two = Engine(demo_backend), Engine(demo_backend)
    length, first = await cached_at_start(one, req)  # its first choice: reads the prompt, hands it on
    assert first == 0
    assert await cached_at_start(two, req) == (length, 0)  # the other server's request reads it all
    assert await cached_at_start(one, req) == (length, length - 1)  # its own next choice takes it
    assert len(one.handoffs) == len(two.handoffs) == 1  # (each request handed its own prompt on, once)
    one.end_unit(one.unit(1, req.response_id))  # one request ends: the other's hand-off stays its own
    assert not len(one.handoffs) and len(two.handoffs)
    two.end_unit(two.unit(1, req.response_id))
    assert not len(two.handoffs) and not demo_backend.prompt_cache.entries


async def test_a_requests_end_is_one_call_that_lets_go_of_its_held_places_and_its_hand_off(demo_backend, monkeypatch):
    """A unit of three choices whose first has read its prompt and handed it on, its others not opened (the request
    ended early): the one call that ends the request gives back both the places held for them and the prompt,
    once; a protocol has nothing else to remember to call."""
    cache_off(demo_backend, monkeypatch)
    engine = Engine(demo_backend, max_queue=4)
    req = ChatRequest(model=demo_backend.model_id, messages=(), prompt="One end: " + "the lazy dog " * 8, max_tokens=2,
                      temperature=0, shared_prompt=True, response_id="cmpl-one-end")
    unit = engine.unit(3, req.response_id)
    async with engine.session(req, unit=unit) as session:
        [ev async for ev in session]
    assert (engine.waiting, len(engine.handoffs)) == (2, 1)  # (two places held; the prompt handed on)
    engine.end_unit(unit)
    assert (engine.waiting, engine.running, len(engine.handoffs)) == (0, 0, 0)
    engine.end_unit(unit)  # (again: nothing more is given back)
    assert (engine.waiting, engine.admission.slots.value) == (0, engine.max_batch)


async def test_rank_0_of_a_group_hands_no_prompt_on_as_its_followers_take_none(demo_backend, monkeypatch):
    """A follower's rows hold no request (group/follower.py): they start where its prompt cache says, and one that
    starts elsewhere than rank 0's has diverged. So rank 0's engine hands no prompt on either: its request's
    second choice starts where the prompt cache says (nothing, with it off), as a follower's does."""
    from group_fakes import StoppingGroup

    cache_off(demo_backend, monkeypatch)
    group = StoppingGroup()  # (rank 0 of two whose broadcasts return at once)
    engine = Engine(demo_backend, group=group, group_timeout=30)
    req = ChatRequest(model=demo_backend.model_id, messages=(), prompt="A group's choices: " + "the lazy dog " * 8,
                      max_tokens=2, temperature=0, shared_prompt=True, response_id="cmpl-a-group")
    try:
        length, first = await cached_at_start(engine, req)
        assert first == 0 and await cached_at_start(engine, req) == (length, 0)
        assert engine.handoffs is None
    finally:
        group.fail("the test is over", [1])  # (its heartbeats and watchdog stop)


async def eventually_empty(engine: Engine) -> int:
    """What the engine still holds once its requests' ends had time to let go (the server's side finishes after
    the client saw its answer end)."""
    for _ in range(150):
        if not len(engine.handoffs):
            break
        await trio.sleep(0.02)
    return len(engine.handoffs)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_whose_choice_failed_holds_no_hand_off_after(serve, demo_backend, monkeypatch, stream):
    """The first choice hands its prompt on and answers; the second fails as it opens (after it took the hand-off):
    the answer is that failure, and nothing the request handed on is held after it, stream or not."""
    cache_off(demo_backend, monkeypatch)
    opened = []
    sampler_for = demo_backend.sampler_for

    def second_fails(prepared, loop):
        opened.append(prepared)
        if len(opened) == 2:
            raise RuntimeError("the second choice's sampler broke")
        return sampler_for(prepared, loop)

    monkeypatch.setattr(demo_backend, "sampler_for", second_fails)
    s = await serve(backend=demo_backend)
    ask = {"model": demo_backend.model_id, "prompt": f"A choice that fails ({stream}): " + "the lazy dog " * 8,
           "n": 2, "max_tokens": 24, "temperature": 1.0, "seed": 4, "stream": stream}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/completions"), json=ask)
    assert "the second choice's sampler broke" in r.text and len(opened) == 2
    assert await eventually_empty(s.engine) == 0 and not demo_backend.prompt_cache.entries


async def test_a_request_its_client_left_before_its_answer_holds_no_hand_off_after(serve, demo_backend, monkeypatch):
    """Not streamed, the client hangs up while its choices decode (the first handed its prompt on): nothing is held
    after (a stream's client that hangs up: test_choices.py)."""
    cache_off(demo_backend, monkeypatch)
    handed = []
    start = demo_backend.start

    def recorded(prepared, model, **kw):
        got = start(prepared, model, **kw)
        handed.append(got[2])
        return got

    monkeypatch.setattr(demo_backend, "start", recorded)
    s = await serve(backend=demo_backend)
    ask = {"model": demo_backend.model_id, "prompt": "A client that leaves: " + "the lazy dog " * 8, "n": 2,
           "max_tokens": 4000, "temperature": 1.0, "seed": 4}
    async with httpx.AsyncClient(timeout=30) as c:
        with trio.move_on_after(30) as waited:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(functools.partial(c.post, s.url("/v1/completions"), json=ask))
                while len(handed) < 2:  # the second choice started from the first's hand-off
                    await trio.sleep(0.02)
                assert len(s.engine.handoffs) == 1
                nursery.cancel_scope.cancel()  # hang up
    assert not waited.cancelled_caught and handed[0] == 0 and handed[1] > 0
    assert await eventually_empty(s.engine) == 0 and not demo_backend.prompt_cache.entries


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_is_handed_on_once_however_many_choices_read_it(serve, demo_backend, monkeypatch, stream):
    """Each of three choices reads its prompt but its last token (the others from the first's hand-off): the
    prompt's KV cache is held once until the request ends, not once more for each choice that took it."""
    cache_off(demo_backend, monkeypatch)
    s = await serve(backend=demo_backend)
    held = []
    end = s.engine.end_unit

    def counted(unit):
        held.append(len(s.engine.handoffs))
        end(unit)

    monkeypatch.setattr(s.engine, "end_unit", counted)
    ask = dict(model=demo_backend.model_id, prompt=f"Handed once ({stream}): " + "the lazy dog " * 8, n=3,
               max_tokens=4, temperature=1.0, seed=6)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
    if stream:
        [chunk async for chunk in await c.completions.create(**ask, stream=True)]
    else:
        assert [choice.index for choice in (await c.completions.create(**ask)).choices] == [0, 1, 2]
    with trio.fail_after(5):  # (a stream's request ends just after its client read the last chunk)
        while not held:
            await trio.sleep(0.02)
    assert held == [1] and not len(s.engine.handoffs)
