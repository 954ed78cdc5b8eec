"""``tinytitan launch`` told to stop (``kill``: SIGTERM; its terminal closed: SIGHUP) stops the agent and the
server it started, as it does when the agent exits; the agent's end is launch's exit status as a shell says it
(killed by Ctrl-C: 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from launch_helpers import ANSWER, env_for, launched_port


def fake_agent(tmp: Path, name: str, body: str) -> dict:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    env = env_for(tmp)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


def up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200  # (a refusal is at once)
    except httpx.HTTPError:
        return False


def launched(tmp_path, agent: str) -> tuple[subprocess.Popen, int]:
    """``tinytitan launch pi --port 0`` on a script, its agent the shell ``agent`` (which writes its pid to
    agent.up), once the agent runs: (launch's process, the port its server bound)."""
    script = tmp_path / "s.yaml"
    script.write_text(f'- "{ANSWER}"\n')
    env = fake_agent(tmp_path, "pi", agent)
    said = tmp_path / "launch.err"
    proc = subprocess.Popen([sys.executable, "-m", "tinytitan", "launch", "pi", "--script", str(script),
                             "--port", "0"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=said.open("wb"), start_new_session=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "agent.up").exists() or not (tmp_path / "agent.up").read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_all(proc, tmp_path)
            raise AssertionError(said.read_text())
        time.sleep(0.2)
    return proc, launched_port(said.read_text())


def stop_all(proc: subprocess.Popen, tmp_path: Path, agent: int | None = None) -> None:
    """launch, its agent and its server (in a session of its own: found by its script, which is the test's own),
    whatever is left."""
    for kill, pid in [(os.killpg, proc.pid)] + ([(os.kill, agent)] if agent is not None else []):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out = subprocess.run(["pgrep", "-f", "--", f"--script {tmp_path / 's.yaml'}"], capture_output=True,
                         text=True).stdout.split()
    for pid in out:
        os.kill(int(pid), signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_launch_killed_stops_its_server(tmp_path, sig):
    proc, port = launched(tmp_path, f"echo $$ > {tmp_path}/agent.up; exec sleep 60")
    try:
        assert up(port)
        proc.send_signal(sig)  # (as `kill`, or the terminal closing, does)
        proc.wait(timeout=30)
        time.sleep(2)
        alive = up(port)
        print("launch rc", proc.returncode, "server up after launch died:", alive)
        assert not alive, "the server launch started outlives it"
        assert proc.returncode == 128 + sig
        agent = int((tmp_path / "agent.up").read_text())
        with pytest.raises(ProcessLookupError):  # the agent is gone too
            os.kill(agent, 0)
    finally:
        stop_all(proc, tmp_path)


def test_agent_killed_by_sigint_exit_code(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(f'- "{ANSWER}"\n')
    env = fake_agent(tmp_path, "pi", "kill -INT $$")
    done = subprocess.run([sys.executable, "-m", "tinytitan", "launch", "pi", "--script", str(script),
                           "--port", "0"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    print("rc", done.returncode, done.stderr[-500:])
    assert done.returncode == 130


def test_a_second_signal_still_stops_the_agent(tmp_path):
    """A terminal closing (SIGHUP) and then a `kill` (SIGTERM) while launch waits for an agent slow to stop: launch
    still waits for it, and kills it, before it exits; it never leaves the agent running."""
    proc, _ = launched(tmp_path, f"trap '' TERM HUP; echo $$ > {tmp_path}/agent.up; exec sleep 60")
    agent = None
    try:
        agent = int((tmp_path / "agent.up").read_text())
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.returncode == 128 + signal.SIGHUP
        with pytest.raises(ProcessLookupError):  # the agent is gone too
            os.kill(agent, 0)
    finally:
        stop_all(proc, tmp_path, agent)
