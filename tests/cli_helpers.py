"""The command line's test helpers: ``tinytitan serve`` started as a process on a free port, read up to its
banner (start), one that must fail at start and does so without a traceback (serve_fails), a process ended
(end_process), and the repository root they run in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def start(args, timeout=60):
    """``tinytitan serve`` with ``args`` on a free port, once its banner is out: the process, the model it serves,
    its address and the banner. A server that neither prints its banner nor exits within ``timeout`` is killed
    (a blocked ``readline`` returns then) and fails the test with what it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "tinytitan", "serve", "--port", "0", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines = []
    try:
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"is serving '([^']+)' at (http://\S+)", line)
            if m:
                for _ in range(20):  # the rest of the banner
                    lines.append(proc.stdout.readline())
                    if "wire_api" in lines[-1]:
                        break
                return proc, m.group(1), m.group(2), "".join(lines)
    finally:
        watchdog.cancel()
    proc.kill()
    proc.wait(timeout=10)
    raise AssertionError(f"server did not start within {timeout}s:\n" + "".join(lines))


def serve_fails(tmp_path, *args, timeout=60) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "tinytitan", "serve", "--state", str(tmp_path / "state"),
                           "--prompt-cache-dir", "off", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    return done


def end_process(proc: subprocess.Popen) -> None:
    """``proc`` asked to stop (SIGTERM), killed where it has not ended within 10 s, and reaped."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
