"""A request for another model that waited behind the running batch and was abandoned (its client left) no longer
holds the batch: a later request for the running model joins it at once, as it would had that request never come."""

from __future__ import annotations

import shutil

import httpx
import trio

from tinytitan.demo_model import ensure_demo_model
from tinytitan.engine.backends.mlx import MLXBackend
from tinytitan.models.resolve import list_models

USER = [{"role": "user", "content": "hi"}]


async def test_an_abandoned_request_for_another_model_does_not_hold_back_the_batch(serve, tmp_path):
    for name in ("alpha", "beta"):
        shutil.copytree(ensure_demo_model(), tmp_path / name)
    s = await serve(backend=[MLXBackend(m.path, m.model_id, lazy=True) for m in list_models(tmp_path)])
    done = {}
    async with httpx.AsyncClient(timeout=120) as c:
        await c.post(s.url("/v1/chat/completions"), json={"model": "alpha", "max_tokens": 2, "messages": USER})

        async def long_alpha():  # seed 1: the demo model writes 3000 tokens without an end-of-turn
            r = await c.post(s.url("/v1/chat/completions"), json={"model": "alpha", "max_tokens": 3000, "seed": 1,
                                                                   "messages": USER})
            assert r.status_code == 200, r.text
            done["long"] = True

        async def beta():
            await c.post(s.url("/v1/chat/completions"), json={"model": "beta", "max_tokens": 2, "messages": USER})

        async def short_alpha():
            r = await c.post(s.url("/v1/chat/completions"), json={"model": "alpha", "max_tokens": 2, "messages": USER})
            assert r.status_code == 200, r.text
            done["short"] = "long" not in done  # answered while the long one still decodes

        async def until(condition):
            with trio.fail_after(60):
                while not condition():
                    await trio.sleep(0.005)

        async with trio.open_nursery() as n:
            n.start_soon(long_alpha)
            await until(lambda: s.engine.batch_size == 1)  # the long one decodes
            async with trio.open_nursery() as client:  # beta's: it leaves while beta waits for the batch
                client.start_soon(beta)
                await until(lambda: s.engine.decoder.arrived())
                client.cancel_scope.cancel()
            await until(lambda: (s.engine.running, s.engine.waiting) == (1, 0))  # beta's place given back
            n.start_soon(short_alpha)
    assert done == {"long": True, "short": True}  # the short one joined the batch, not waited for it to drain
    assert s.engine.resident == "alpha"  # beta was never loaded
