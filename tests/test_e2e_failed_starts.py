"""A server or proxy the end-to-end harnesses start, whose start fails (no banner within its bound), is stopped
there: the harness raises before anyone holds it to stop, and left running it outlives the test (its port, its
memory, a model loaded). Each is shown on a stand-in that never prints a banner (a shell script that sleeps),
with a short bound, so these run without the clients installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import claude_harness as claude
import launch_helpers
from vision_e2e_harness import Proxy, Vision


@pytest.fixture
def started(tmp_path, monkeypatch) -> list[subprocess.Popen]:
    """Every process started during the test, each of them the stand-in (killed at the end, whatever is left)."""
    stand_in = tmp_path / "stand-in"
    stand_in.write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 60\n")
    stand_in.chmod(0o755)
    made: list[subprocess.Popen] = []

    class StandIn(subprocess.Popen):
        def __init__(self, args, *rest, **options):
            super().__init__([str(stand_in)], *rest, **options)
            made.append(self)

    monkeypatch.setattr(subprocess, "Popen", StandIn)
    yield made
    stop_all(made)


def stop_all(made: list[subprocess.Popen]) -> None:
    """Each process killed (whatever is left) and reaped, and its pipes closed: the harness that started it
    raised before anyone held it, so nothing else closes them (left to the garbage collector, each is a
    ResourceWarning)."""
    for p in made:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for pipe in (p.stdin, p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


def test_the_stand_ins_are_stopped_with_their_pipes_closed():
    proc = subprocess.Popen([shutil.which("sleep"), "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    stop_all([proc])
    assert proc.returncode is not None
    assert proc.stdin.closed and proc.stdout.closed and proc.stderr.closed


def test_a_vision_server_that_never_starts_is_stopped(started, tmp_path, monkeypatch):
    monkeypatch.setattr(claude, "START_TIMEOUT", 0.3)
    with pytest.raises(AssertionError, match="no line matching"):
        Vision(tmp_path)
    (server,) = started
    assert server.poll() is not None


def test_a_recording_proxy_that_never_starts_is_stopped(started, tmp_path, monkeypatch):
    monkeypatch.setattr(claude, "PROXY_TIMEOUT", 0.3)
    with pytest.raises(AssertionError, match="no line matching"):
        Proxy("http://127.0.0.1:9", tmp_path)
    (proxy,) = started
    assert proxy.poll() is not None


def test_a_launch_test_server_that_never_starts_is_stopped(started, tmp_path, monkeypatch):
    monkeypatch.setattr(launch_helpers, "START_TIMEOUT", 0.3)
    with pytest.raises(AssertionError, match="the scripted server did not start"):
        launch_helpers.Server(tmp_path)
    (server,) = started
    assert server.poll() is not None


def test_the_scripted_server_and_proxy_that_never_start_are_stopped(started, tmp_path, monkeypatch):
    """(tinytitan() stopped both already, in its finally: held here so it stays so)"""
    monkeypatch.setattr(claude, "START_TIMEOUT", 0.3)
    with pytest.raises(AssertionError, match="no line matching"):
        with claude.tinytitan(["unused"], tmp_path):
            pass
    (server,) = started
    assert server.poll() is not None
