"""A group of two processes (group_harness.py) whose follower fails:
- killed while answers that are not streamed are in flight: each is refused as a request that arrives once the
  group is broken is (503 ``group_broken`` in its protocol's envelope, a status a load balancer retries
  elsewhere), not a 500;
- stalled past --group-timeout (SIGSTOP: a host asleep, swapping), which breaks the group: when it comes back,
  nothing is left to lead it, and it stops rather than wait in the ring's collective for ever, spinning."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
import trio

import strict
from group_harness import Group, body


@pytest.fixture
def group(tmp_path):
    with Group(tmp_path) as g:
        yield g


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


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def test_a_follower_back_from_a_stall_past_the_timeout_does_not_spin_for_ever(group):
    follower = group.procs[1]
    follower.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while httpx.get(group.base + "/health").status_code != 503:  # the watchdog: --group-timeout 4
        assert time.monotonic() < deadline
        time.sleep(0.2)
    follower.send_signal(signal.SIGCONT)
    time.sleep(3)
    if follower.poll() is None:
        before = cpu_s(follower.pid)
        time.sleep(5)
        spun = cpu_s(follower.pid) - before
        assert follower.poll() is not None or spun < 1.0, f"rank 1 lives on, {spun:.1f}s of CPU in 5s"


def test_a_followers_wait_is_allowed_what_rank_0_allows_the_step():
    """Under pipeline sharding the first stage waits while rank 0 runs its own layers: a step reading many prompt
    tokens may keep it waiting as long as rank 0 may take (the timeout for each 2048 tokens), not one timeout."""
    from tinytitan.engine.decode.plan import Plan, Prefill, Sample
    from tinytitan.engine.decode.step import PREFILL_STEP
    from tinytitan.engine.group.follower import next_wait

    burst = Plan(alone=tuple(Prefill(r, tuple(range(PREFILL_STEP))) for r in range(3)) + (Sample(3, (1, 2)),))
    assert next_wait({"p": burst.as_ints()}, burst, 4.0) == 4.0 * (3 * PREFILL_STEP + 2) / PREFILL_STEP
    one = Plan(alone=(Sample(0, (1,)),))
    assert next_wait({"p": one.as_ints()}, one, 4.0) == 4.0
    assert next_wait({"i": 0.01}, None, 4.0) == 4.0  # a heartbeat
    assert next_wait({"m": "other"}, None, 4.0) == 40.0  # a switch of models: rank 0 loads before its next
