"""Codex CLI end to end, the harness: a scripted ``tinytitan serve`` on a free port, tools/record_proxy.py (and
record_socket.py) forwarding to it and recording what Codex sent, and ``codex exec`` run with a fresh HOME,
CODEX_HOME and working directory and a bounded timeout, told not to retry (one failure is one request). CODEX:
the installed CLI, or None."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from cli_helpers import end_process


ROOT = Path(__file__).resolve().parent.parent
CODEX = shutil.which("codex")
RUN_TIMEOUT = 120  # seconds per codex exec
START_TIMEOUT = 60  # seconds for the server / proxy banner


@contextmanager
def _process(args, log: Path, pattern: str, cwd=ROOT, env=None):
    """Start ``args`` with stdout+stderr into ``log``; yield the first match of ``pattern`` in it."""
    with open(log, "w") as out:
        proc = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            m = re.search(pattern, log.read_text())
            if m:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{args[:4]} did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield m
    finally:
        end_process(proc)


@contextmanager
def scripted_server(script: list, scratch: Path, extra_args=()):
    """``tinytitan serve --script`` on a free port → (base URL, served model id). Its cache (the Codex catalog it
    writes) is its own: other servers on the machine, of other versions, write the same model id's entry into the
    shared one."""
    path = scratch / "script.yaml"
    path.write_text(json.dumps(script))  # JSON is YAML
    args = [sys.executable, "-m", "tinytitan", "serve", "--script", str(path), "--port", "0",
            "--responses-store", "memory", *extra_args]
    env = {**os.environ, "TINYTITAN_CACHE": str(scratch / "cache")}
    with _process(args, scratch / "server.log", r"is serving '([^']+)' at (http://\S+)", env=env) as m:
        yield m.group(2), m.group(1)


@contextmanager
def _recorder(tool: str, log: str, upstream: str, out: Path, scratch: Path):
    """tools/``tool`` forwarding to ``upstream``, appending what it records to ``out``, its output in
    ``scratch/log`` → its base URL (both recorders take the same options and print the same banner)."""
    args = [sys.executable, str(ROOT / "tools" / tool), "--port", "0", "--upstream", upstream, "--out", str(out)]
    with _process(args, scratch / log, r"listening on (http://\S+)") as m:
        yield m.group(1)


def recording_proxy(upstream: str, out: Path, scratch: Path):
    """HTTP (Codex with a provider of its own): tools/record_proxy.py, one line in ``out`` a request."""
    return _recorder("record_proxy.py", "proxy.log", upstream, out, scratch)


def socket_recorder(upstream: str, out: Path, scratch: Path):
    """WebSockets (Codex's built-in provider): tools/record_socket.py, one line in ``out`` an event."""
    return _recorder("record_socket.py", "socket-proxy.log", upstream, out, scratch)


def run_codex(base: str, model: str, root: Path, prompt: str, *extra: str,
              timeout: float = RUN_TIMEOUT, builtin: bool = False) -> subprocess.CompletedProcess:
    """``codex exec`` in ``root/work`` with HOME ``root/home`` and CODEX_HOME ``root/codex``; ``extra``
    options go before the prompt. ``builtin``: Codex's own ``openai`` provider pointed at ``base``
    (``openai_base_url``; this Codex ignores the OPENAI_BASE_URL variable), which dials a WebSocket first."""
    work, home, codex_home = root / "work", root / "home", root / "codex"
    for d in (work, home, codex_home):
        d.mkdir(parents=True, exist_ok=True)
    if builtin:
        config = f'''model = "{model}"
openai_base_url = "{base}/v1"
'''
    else:
        config = f'''model = "{model}"
model_provider = "local"

[model_providers.local]
name = "local"
base_url = "{base}/v1"
env_key = "LOCAL_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
'''
    (codex_home / "config.toml").write_text(config)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "LOCAL_API_KEY": "x",
           **({"OPENAI_API_KEY": "x"} if builtin else {})}
    t0 = time.monotonic()
    result = subprocess.run([CODEX, "exec", "--skip-git-repo-check", "-c", "analytics.enabled=false",
                             "--disable", "plugins", "-s", "danger-full-access", *extra, prompt],
                            cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=timeout)
    result.wall = time.monotonic() - t0  # seconds the run took
    return result


def explain_run(result) -> str:
    return f"rc={result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr[-4000:]}"
