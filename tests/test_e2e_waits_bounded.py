"""The end-to-end tests' waits on a real client are bounded: a client (or tmux, or a server's log) that stops
answering fails the test within its bound, saying what it waited for, rather than hanging the run. Each is
shown on a stand-in that hangs (a shell script that sleeps), so these run without the clients installed."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import claude_harness as claude
import cli_helpers
import tmux_harness
from vision_e2e_harness import Vision


def hanging(path: Path, prints: str = "") -> str:
    """An executable that prints ``prints`` and then sleeps far past any bound here."""
    path.write_text(f"#!/bin/sh\nprintf '%s' '{prints}'\nexec sleep 60\n")
    path.chmod(0o755)
    return str(path)


def test_a_claude_run_that_hangs_fails_with_what_it_printed(tmp_path, monkeypatch):
    monkeypatch.setattr(claude, "CLAUDE", hanging(tmp_path / "claude", '{"type": "system", "subtype": "init"}\n'))
    started = time.monotonic()
    with pytest.raises(AssertionError, match="claude did not finish within 1s") as failed:
        claude.run_claude("http://127.0.0.1:9", "m", "hi", tmp_path, timeout=1)
    assert '{"type": "system", "subtype": "init"}' in str(failed.value)
    assert time.monotonic() - started < 20


def test_a_tmux_that_hangs_fails_the_wait_for_the_window(tmp_path, monkeypatch):
    monkeypatch.setattr(tmux_harness, "TMUX", hanging(tmp_path / "tmux"))
    monkeypatch.setattr(tmux_harness, "TMUX_TIMEOUT", 1)
    started = time.monotonic()
    with pytest.raises(AssertionError, match="tmux capture-pane did not answer within 1s"):
        tmux_harness.wait_for_screen("tt-none", "❯", 60)
    assert time.monotonic() - started < 20


def test_a_request_the_server_never_logs_fails_the_wait_with_the_servers_lines():
    vision = object.__new__(Vision)  # (no server: its log so far is all a wait reads)
    vision.proc = SimpleNamespace(lines=["INFO tinytitan: serving\n"])
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"0 of 1 request lines within 0.2s:\nINFO tinytitan: serving"):
        vision.wait_requests(0, 1, timeout=0.2)
    assert time.monotonic() - started < 20


def test_a_served_banner_that_never_comes_fails_the_start_within_its_bound(tmp_path, monkeypatch):
    """cli_helpers' ``start`` reads the server's output line by line: a server that prints part of a line and then
    neither goes on nor exits once held that read (and the run) past any deadline."""
    stand_in = hanging(tmp_path / "serve", "loading")
    real = cli_helpers.subprocess.Popen
    monkeypatch.setattr(cli_helpers.subprocess, "Popen", lambda _args, **kw: real([stand_in], **kw))
    started = time.monotonic()
    with pytest.raises(AssertionError, match="server did not start within 1s:\nloading"):
        cli_helpers.start([], timeout=1)
    assert time.monotonic() - started < 20
