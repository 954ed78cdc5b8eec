"""A client that leaves before its generation's first event (while its request waits for a decode slot) is still
logged and counted with its prompt: the prompt was rendered and tokenized on admission, so its size is known."""

from __future__ import annotations

import logging

import httpx
import trio

from observe_helpers import MODEL, scrape, tokens
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

LONG = " ".join(f"word{i}" for i in range(400))
WAITING = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "a question that waits its turn"}]}


async def test_a_client_that_leaves_while_queued_is_counted_with_its_prompt(serve, demo_tok, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20), ScriptEntry("ok")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    engine = s.server.engine
    async with httpx.AsyncClient(timeout=30) as c:
        async with trio.open_nursery() as n:
            async def hold():
                body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "talk"}]}
                async with c.stream("POST", s.url("/v1/chat/completions"), json=body) as r:
                    async for _ in r.aiter_bytes():
                        await trio.sleep_forever()  # hold the slot until the test ends

            n.start_soon(hold)
            with trio.fail_after(10):
                while engine.running == 0:
                    await trio.sleep(0.01)
            before = await scrape(s)
            with trio.move_on_after(0.5) as left:  # the queued request is given up before its first event
                await c.post(s.url("/v1/chat/completions"), json=WAITING)
            assert left.cancelled_caught and len(engine.sessions) == 2  # (it was tokenized, then waited)
            with trio.fail_after(10):
                while engine.waiting:
                    await trio.sleep(0.01)
            n.cancel_scope.cancel()
        with trio.fail_after(10):  # the held request is counted when the server sees it go; wait for both records
            while sum(t["stop_reason"] == "cancelled" for t in s.server.observer.recent()) < 2:
                await trio.sleep(0.01)
        after = await scrape(s)
        r = await c.post(s.url("/v1/chat/completions"), json={**WAITING, "stream": False})
    prompt = r.json()["usage"]["prompt_tokens"]  # the same prompt, answered
    cut = [t for t in s.server.observer.recent() if t["stop_reason"] == "cancelled"]
    (left_turn,) = [t for t in cut if t["ttft_s"] is None]
    (held_turn,) = [t for t in cut if t["ttft_s"] is not None]
    assert left_turn["prompt_tokens"] == prompt and left_turn["completion_tokens"] == 0
    assert tokens(after, "prompt") - tokens(before, "prompt") == prompt + held_turn["prompt_tokens"]
    assert any(f"prompt={prompt} cached=0 completion=0 ttft=- stop=cancelled" in rec.getMessage()
               for rec in caplog.records), [rec.getMessage() for rec in caplog.records]
