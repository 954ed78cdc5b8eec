"""A group of three processes (group_harness.py; a model whose heads divide among three ranks): a follower that
stalls mid-step (SIGSTOP: its host asleep, swapping) breaks the group after --group-timeout, and the answer in
flight is 503 ``group_broken``; the other follower, which never stalled, is left inside the step's forward, in a
collective waiting for the stalled one: it stops itself too, rather than spin there for as long as that one
stays away (``mlx.launch`` ends the ranks only when one exits, and a stalled one has not)."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
import trio

from group_harness import Group, body, wide_model


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory):
    return wide_model(tmp_path_factory.mktemp("wide") / "model")


@pytest.fixture
def three(tmp_path, wide_dir):
    with Group(tmp_path, "--model", str(wide_dir), "--model-id", "m", ranks=3) as g:
        yield g


async def test_a_follower_stalled_mid_step_does_not_leave_the_other_spinning_in_the_forward(three):
    got = {}

    async def ask():
        path, payload = body("chat", "A long answer that rank 1 will stall in the middle of.", False,
                             max_tokens=4000, model="m")
        async with httpx.AsyncClient(timeout=60) as c:
            got["r"] = await c.post(three.base + path, json=payload)

    with trio.fail_after(60):
        async with trio.open_nursery() as n:
            n.start_soon(ask)
            while httpx.get(three.base + "/health").json()["group"]["steps"] < 10:
                await trio.sleep(0.05)
            three.procs[1].send_signal(signal.SIGSTOP)
    r = got["r"]
    assert r.status_code == 503 and r.json()["error"]["code"] == "group_broken", r.text
    # rank 2: --group-timeout 4 for the forward it is stuck in (and as much for a wait for rank 0's next message)
    deadline = time.monotonic() + 20
    while three.procs[2].poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert three.procs[2].poll() is not None, "rank 2 lives on, in the stalled step's collective: " + \
        three.logs[2].read_text()[-500:]
    assert "restart the whole group" in three.logs[2].read_text()


def test_a_catalog_model_with_fewer_layers_than_ranks_is_refused_by_name_not_a_500(tmp_path, wide_dir):
    """--sharding pipeline gives each rank at least one layer (mlx-lm): a model of two layers cannot be split
    across three, and a request naming it is refused as an unshardable model is (501 ``model_unshardable``,
    docs/distributed.md), not a 500 carrying mlx-lm's ValueError; the group serves the others, whole."""
    import shutil

    from group_harness import pipeline_model

    catalog = tmp_path / "models"
    pipeline_model(catalog / "small")
    shutil.copytree(wide_dir, catalog / "wide")
    g = Group(tmp_path, "--models-dir", str(catalog), "--sharding", "pipeline", ranks=3)
    try:
        g.wait()
        for model, status in [("small", 501), ("wide", 200), ("small", 501)]:
            path, payload = body("chat", "hi", False, max_tokens=3, model=model)
            r = httpx.post(g.base + path, json=payload, timeout=60)
            assert r.status_code == status, (model, r.status_code, r.text)
            if status == 501:
                assert r.json()["error"]["code"] == "model_unshardable", r.text
                assert "it has 2 layers" in r.json()["error"]["message"], r.text
        assert httpx.get(g.base + "/health").json()["group"]["status"] == "ok"
    finally:
        g.stop()
