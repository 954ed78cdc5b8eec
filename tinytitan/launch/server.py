"""The server an agent is launched against: one already running on the port, or one started for the agent.

Rules:
- Running means ``GET /health`` answers with tinytitan's body; what it serves is ``GET /v1/models``. Something
  else on the port is named, never talked over.
- A started server is ``python -m tinytitan serve …`` in a session of its own (Ctrl-C at the terminal is the
  agent's), its output in a log file; while it starts, that log is relayed line by line (model conversion and
  loading say where they are), and its exit before it answers is an error quoting the log's end.
- It is stopped (SIGINT, then SIGKILL after 15 s) when the agent exits.
- Port 0 is passed on as it is: the server binds a free port itself and its banner names it (a port picked here
  and passed on could be taken by another program, or another launch, before the server binds it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class LaunchError(Exception):
    """Something launch cannot go on from; its message says what to do."""


def _get(url: str, key: str | None, timeout: float = 2.0, headers: dict | None = None):
    req = urllib.request.Request(url, headers={**({"Authorization": f"Bearer {key}"} if key else {}),
                                               **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback, our own server)
        return json.loads(resp.read().decode())


def probe(base: str, key: str | None) -> list[dict] | None:
    """The model cards served at ``base``, or None when nothing listens there."""
    try:
        health = _get(base + "/health", key)
    except urllib.error.HTTPError as exc:
        raise LaunchError(f"{base} answers /health with {exc.code}: not a tinytitan server this key can use "
                          "(pass --api-key, or another --port)") from None
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(health, dict) or "status" not in health:
        raise LaunchError(f"{base} is not a tinytitan server: choose another --port")
    try:
        return list(_get(base + "/v1/models", key).get("data") or [])
    except urllib.error.HTTPError as exc:
        raise LaunchError(f"{base}/v1/models answered {exc.code}: pass the server's --api-key") from None


def codex_catalog(base: str, key: str | None) -> list[dict]:
    """The server's Codex catalog entries (what it answers Codex's own catalog fetch with)."""
    try:
        return list(_get(base + "/v1/models?client_version=0.171.0", key).get("models") or [])
    except (urllib.error.URLError, OSError, ValueError):
        return []


BANNER_URL = re.compile(r"^tinytitan is serving '.*' at \S+:(\d+)$", re.M)  # (banner.py)


class StartedServer:
    """``tinytitan serve`` started for an agent; ``stop()`` ends it. ``port``: the port it listens on (for a 0,
    the one it bound, once ``wait_ready`` returns)."""

    def __init__(self, serve_args: list[str], port: int, log_path: Path):
        self.log_path = log_path
        self.port = port
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")  # noqa: SIM115 (held for the server's life)
        argv = [sys.executable, "-m", "tinytitan", "serve", *serve_args, "--port", str(port)]
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self, base: str, key: str | None, relay=None, timeout: float | None = None) -> list[dict]:
        """Wait until the server answers at ``base`` (its port replaced by the one bound, for a 0);
        ``relay(line)`` gets each line of its log meanwhile."""
        start, offset = time.monotonic(), 0
        while True:
            if self.port == 0:
                self._find_port()
            offset = self._relay(offset, relay)
            if self.proc.poll() is not None:
                self._relay(offset, relay)
                raise LaunchError(f"tinytitan serve exited ({self.proc.returncode}) before it answered:\n"
                                  + self.tail())
            cards = probe(f"{base.rsplit(':', 1)[0]}:{self.port}", key) if self.port else None
            if cards:
                self._relay(offset, relay)
                return cards
            if timeout is not None and time.monotonic() - start > timeout:
                self.stop()
                raise LaunchError(f"tinytitan serve did not answer within {timeout:.0f} s:\n" + self.tail())
            time.sleep(0.25)

    def _find_port(self) -> None:
        try:
            found = BANNER_URL.search(self.log_path.read_text(errors="replace"))
        except OSError:
            return
        if found:
            self.port = int(found.group(1))
            i = len(self.argv) - 1 - self.argv[::-1].index("--port")
            self.argv[i + 1] = str(self.port)  # (the line printed for --print: the port the agent is told)

    def _relay(self, offset: int, relay) -> int:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return offset
        end = data.rfind(b"\n") + 1
        if relay is not None:
            for line in data[:end].decode(errors="replace").splitlines():
                relay(line)
        return offset + end

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=15)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self._log.close()
