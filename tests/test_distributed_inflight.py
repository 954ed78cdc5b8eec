"""A group of two processes (group_harness.py) whose rank 1 is killed while answers that are not streamed are in
flight: each is refused as a request that arrives once the group is broken is (503 ``group_broken`` in its
protocol's envelope, a status a load balancer retries elsewhere), not a 500."""

from __future__ import annotations

import signal

import httpx
import pytest
import trio

import strict
from group_harness import Group, body


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    try:
        g.wait()
        yield g
    finally:
        g.stop()


async def test_answers_in_flight_when_a_rank_dies_are_503_group_broken(group):
    protocols = ["chat", "completions", "messages", "ollama"]  # four: the harness's --max-batch, all decoding
    got: dict[str, httpx.Response] = {}

    async def ask(protocol):
        path, payload = body(protocol, f"A long answer in {protocol} that rank 1 will not see the end of.", False,
                             max_tokens=4000)
        async with httpx.AsyncClient(timeout=60) as c:
            got[protocol] = await c.post(group.base + path, json=payload)

    with trio.fail_after(60):  # no hang
        async with trio.open_nursery() as n:
            for p in protocols:
                n.start_soon(ask, p)
            while (h := httpx.get(group.base + "/health").json())["running"] < 4 or h["group"]["steps"] < 20:
                await trio.sleep(0.02)
            group.procs[1].send_signal(signal.SIGKILL)
    for p in protocols:
        r = got[p]
        assert r.status_code == 503, (p, r.status_code, r.text)
        assert "group of processes serving it is broken" in r.text, r.text
    for p in ("chat", "completions"):
        assert got[p].json()["error"]["code"] == "group_broken", got[p].text
    strict.anthropic_error(got["messages"].json())
    assert httpx.get(group.base + "/health").status_code == 503
