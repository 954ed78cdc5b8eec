"""The stall tests' helpers: the slowest /health answer while an attack runs (a stall of the event loop the
server runs in also shows as a late wake-up from a short sleep), and the attack a POST of a body."""

from __future__ import annotations

import time

import httpx
import trio


async def health_while(s, attack) -> tuple[float, object]:
    """The slowest /health answer while ``attack`` runs, and what the attack gave. The server runs in this
    event loop, so a stall also shows as a late wake-up from a short sleep (the attack may end before the first
    /health is sent)."""
    worst, out, done = 0.0, [], trio.Event()

    async def pause(seconds: float) -> float:
        t = time.monotonic()
        await trio.sleep(seconds)
        return time.monotonic() - t - seconds

    async def run():
        try:
            out.append(await attack())
        finally:
            done.set()

    async with httpx.AsyncClient(timeout=60) as c, trio.open_nursery() as n:
        n.start_soon(run)
        worst = await pause(0.2)
        while not done.is_set():
            t = time.monotonic()
            assert (await c.get(s.url("/health"))).status_code == 200
            worst = max(worst, time.monotonic() - t, await pause(0.1))
    return worst, out[0]


async def health_while_posting(s, body: bytes, path: str = "/v1/chat/completions", headers: dict | None = None):
    """``health_while`` a POST of ``body`` (JSON) to ``path``."""
    async def attack():
        async with httpx.AsyncClient(timeout=600) as c:
            return await c.post(s.url(path), content=body, headers={"content-type": "application/json",
                                                                     **(headers or {})})

    return await health_while(s, attack)
