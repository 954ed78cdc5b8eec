"""A follower that stalls past --group-timeout (SIGSTOP: a host asleep, swapping) breaks the group; when it comes
back, nothing is left to lead it: it should stop rather than wait in the ring's collective for ever, spinning."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from group_harness import Group


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    try:
        g.wait()
        yield g
    finally:
        for p in g.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        g.stop()


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
