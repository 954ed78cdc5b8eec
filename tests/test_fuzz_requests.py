"""Request fuzzing in the suite: mutated bodies on every POST route of a real server (see request_fuzz.py).

Bounded to about a minute: ``TINYTITAN_FUZZ_REQUESTS`` examples (default 400), derandomized so a CI run
is repeatable; ``tools/fuzz_requests.py`` runs as many as asked, with fresh randomness, and reports counts.
"""

from __future__ import annotations

import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

import request_fuzz as rf

EXAMPLES = int(os.environ.get("TINYTITAN_FUZZ_REQUESTS", "400"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = rf.Server(tmp_path_factory.mktemp("fuzz"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def client():
    with httpx.Client(timeout=rf.ANSWER_SECONDS) as c:
        yield c


@pytest.mark.parametrize("i", range(len(rf.FIXED)))
def test_inputs_that_found_defects(server, client, i):
    case = rf.FIXED[i]
    out = rf.check(client, server.base, case)
    assert out.problem is None and out.status < 500, f"{out.problem}\n{case.describe()}"


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(case=rf.cases())
def test_mutated_requests(server, client, case):
    out = rf.check(client, server.base, case)
    assert out.problem is None, f"{out.problem}\n{case.describe()}"


@pytest.fixture(scope="module")
def socket(server):
    from httpx_ws import connect_ws

    with httpx.Client(timeout=rf.ANSWER_SECONDS) as c, connect_ws(server.base + "/v1/responses", c) as ws:
        yield ws


RESPONSES = [r for r in rf.ROUTES if r.path == "/v1/responses"]


@settings(max_examples=max(1, EXAMPLES // 4), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(case=rf.cases(RESPONSES))
def test_mutated_frames_over_the_websocket(server, socket, case):
    """The Responses cases as frames on one socket: each answered in band, the socket never dropped."""
    out = rf.check_frame(socket, case)
    assert out.problem is None, f"{out.problem}\n{case.describe()}"


def test_every_post_route_is_fuzzed():
    """Each POST route a spec declares has a fuzz route (a ``<param>`` segment stands for any one segment):
    a route added to a spec is fuzzed once it is added here."""
    import re

    from tinytitan.speclang.load import load_protocol, spec_dir

    declared = {r["path"] for p in spec_dir().glob("*.yaml") for r in load_protocol(p).routes if r["method"] == "POST"}
    fuzzed = [r.path for r in rf.ROUTES]
    missing = sorted(path for path in declared
                     if not any(re.fullmatch(re.sub(r"<[^>]+>", "[^/]+", path), f) for f in fuzzed))
    assert not missing, f"POST routes the fuzzer never tries: {missing} (add them to tests/request_fuzz.py ROUTES)"


def test_the_server_is_idle_and_healthy_after(server, client):
    assert rf.healthy(client, server.base) is None
