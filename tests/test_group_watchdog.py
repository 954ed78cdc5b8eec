"""A rank that stops answering mid-step leaves rank 0's model thread in a collective that never returns: the
group's watchdog breaks the group after ``group_timeout`` and ends each waiting consumer's side — in-band
Failed for a stream under way, the consumer's exception for a request not started yet, the exit of one that
hung up — with every place given back, while the rows themselves are ended only by the model thread, once
it comes back, without a second ending reaching anyone (lockstep.py's rules). The group is rank 0 of two
whose broadcast blocks when told (the model and its steps are the demo model's, on this process)."""

from __future__ import annotations

import pytest
import trio

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.engine import Engine
from tinytitan.engine.group.ranks import GroupBroken
from tinytitan.events import Failed, Finished, Started, TextDelta
from group_fakes import StoppingGroup

TIMEOUT = 2.0  # b enters within it (the group refuses new requests once broken)


def req(text: str, max_tokens: int = 2000) -> ChatRequest:
    return ChatRequest(model="tinytitan-demo", messages=(Message("user", text),), reasoning=False, temperature=0,
                       max_tokens=max_tokens)


async def test_a_rank_that_stops_answering_ends_every_consumer_and_the_rows_end_later_once(demo_backend):
    demo_backend.prompt_cache.clear()
    group = StoppingGroup()
    engine = Engine(demo_backend, max_batch=4, group=group, group_timeout=TIMEOUT)
    streamed, waiting, boxes = [], [], {}
    c_started, stopped = trio.Event(), trio.Event()
    left = False

    async def consume(name, session, into):
        boxes[name] = session
        async for ev in session:
            into.append(ev)
            if name == "c" and isinstance(ev, Started):
                c_started.set()
                return

    async def a(nursery):
        async with engine.session(req("Tell me a long story about the sea.")) as s:
            boxes["a"] = s
            async for ev in s:
                streamed.append(ev)
                if isinstance(ev, TextDelta) and not group.stopped.is_set():
                    await c_started.wait()
                    group.stopped.set()  # the next broadcast never returns
                    stopped.set()
                    nursery.start_soon(b)

    async def b():  # arrives while the model thread is stuck: it never starts
        while not group.stuck.is_set():
            await trio.sleep(0.005)
        with pytest.raises(GroupBroken, match="rank 1 died or stopped answering") as err:
            async with engine.session(req("Anyone there?", max_tokens=8)) as s:
                await consume("b", s, waiting)
        # what every protocol answers a broken group with (a 503 a load balancer retries), not a 500
        assert (err.value.kind, err.value.code) == ("unavailable", "group_broken")

    async def c():  # under way beside a, and hangs up while the model thread is stuck
        nonlocal left
        async with engine.session(req("A second story, about a forest.")) as s:
            await consume("c", s, [])
            await stopped.wait()
        left = True

    try:
        with trio.fail_after(TIMEOUT + 20):
            async with trio.open_nursery() as n:
                n.start_soon(a, n)
                n.start_soon(c)
        assert left and waiting == []
        assert isinstance(streamed[-1], Failed) and "rank 1 died or stopped answering" in streamed[-1].message
        assert streamed[-1].type == "unavailable"  # in-band, of the kind its protocol spells as unavailable
        assert not any(isinstance(ev, (Failed, Finished)) for ev in streamed[:-1])
        assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)
        assert engine.health()["status"] == "broken"
        assert all(not s._box.let_go for s in boxes.values())  # the model thread has let go of none of them
        queued = {name: len(s._box.queue) for name, s in boxes.items()}  # c's, left unread when it hung up
    finally:
        group.fail("the test is over")  # (where it failed first) the idle heartbeats stop
        group.stopped.clear()
        group.back.set()
    # the model thread comes back: its fold ends every row (a's, c's, and b's, which was waiting), sending nothing
    with trio.fail_after(30):
        await engine.model_thread.run_sync(lambda: None)
        await trio.sleep(0.1)  # its letting go reaches the trio side
    assert all(s._box.let_go for s in boxes.values())
    assert {name: len(s._box.queue) for name, s in boxes.items()} == queued
    assert (engine.running, engine.waiting, engine.admission.slots.value) == (0, 0, 4)


def test_a_long_step_of_many_prompt_tokens_is_no_lost_rank():
    """A burst of long prompts reads a chunk of each in one step: on a large model minutes of work on every rank.
    The watchdog allows ``timeout`` for each PREFILL_STEP tokens a step reads, and names the step it gave up on."""
    import time

    from tinytitan.engine.decode.plan import PREFILL_STEP, Plan, Prefill
    from tinytitan.engine.group.lockstep import Lead

    group = StoppingGroup()
    lead = Lead(group, timeout=0.4, idle_s=0)
    lead.watch()
    start = time.monotonic()
    lead.busy("a decode step", Plan(alone=tuple(Prefill(i, tuple(range(PREFILL_STEP))) for i in range(3))))
    while group.broken is None:  # (the watchdog is a thread that looks every 0.1 s: a busy machine wakes it late)
        assert time.monotonic() - start < 30, "the watchdog never gave up on the step"
        time.sleep(0.01)
    waited = time.monotonic() - start  # (seen within 10 ms of the break, unless this thread was held back too)
    assert waited > 1.2, f"broken after {waited:.2f}s: within the three timeouts it allows"
    assert "a decode step reading 6144 tokens waited 1.2s for it" in group.broken
