"""Claude Code end to end, the harness: the real ``claude`` CLI against ``tinytitan serve --script``.

``tinytitan`` starts ``python -m tinytitan serve --script FILE --port 0`` as a subprocess (the scripted backend:
request k gets entry k, the last repeats) and puts ``tools/record_proxy.py`` in forward mode between it and the
client (so a test sees exactly what Claude Code sent); ``run_claude`` runs ``claude -p ... --output-format
stream-json --verbose`` offline, with a fresh HOME, in a temporary working directory. The rest read what came
back: the proxy's record, the stream-json events, the server's request log.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from conftest import needs

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = shutil.which("claude")
# the mark of a test (or, in pytestmark, a module) that runs the real Claude Code: skipped without it, a failure
# without it under CI=true (conftest.needs)
needs_claude = needs(CLAUDE is None, reason="Claude Code (`claude`) is not installed: "
                                            "npm install -g @anthropic-ai/claude-code@2.1.337")

START_TIMEOUT = 120  # server start (the first run may build the demo tokenizer)
CLAUDE_TIMEOUT = 120  # one `claude -p` run
PROXY_TIMEOUT = 30  # tools/record_proxy.py's start


def tool_call(name: str, arguments: dict) -> str:
    """A raw model output calling a tool, in the Qwen markup the scripted backend parses."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class Proc:
    """A subprocess whose output is drained by a thread (so it can never block on a full pipe)."""

    def __init__(self, argv: list[str], cwd: Path):
        self.argv = argv
        self.p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stdout:
            self.lines.append(line)
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.argv[:4]}: no line matching {pattern!r} within {timeout}s:\n"
                                     + "".join(self.lines[-40:]))
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"{self.argv[:4]} exited ({self.p.wait(10)}) before printing {pattern!r}:\n"
                                     + "".join(self.lines[-40:]))
            m = rx.search(line)
            if m:
                return m

    @contextmanager
    def starting(self):
        """Around the wait for a start: one that fails (no banner within the bound, an exit, a check) stops the
        process, which the caller never gets to stop and would outlive the test."""
        try:
            yield self
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)


@contextmanager
def tinytitan(script: list[str], tmp: Path, server_args=(), banner: list | None = None):
    """Serve ``script`` with ``tinytitan serve --script`` behind a recording proxy (``banner``: filled with the
    server's output lines up to its Codex block, the Claude Code line among them).

    Yields (base URL of the proxy, served model id, path of the proxy's JSONL record)."""
    script_file = tmp / "script.yaml"
    script_file.write_text(yaml.safe_dump(script, allow_unicode=True))
    record = tmp / "requests.jsonl"
    server = proxy = None
    try:
        server = Proc([sys.executable, "-m", "tinytitan", "serve", "--script", str(script_file), "--port", "0",
                       *server_args], cwd=ROOT)
        m = server.wait_for(r"tinytitan is serving '([^']+)' at (http://\S+)", START_TIMEOUT)
        model_id, upstream = m.group(1), m.group(2)
        if banner is not None:
            server.wait_for(r"claude --model", 10)
            banner.extend(server.lines)
            banner.append(server)  # (its later lines: the request log)
        proxy = Proc([sys.executable, str(ROOT / "tools" / "record_proxy.py"), "--upstream", upstream,
                      "--port", "0", "--out", str(record)], cwd=ROOT)
        base = proxy.wait_for(r"listening on (http://\S+)", PROXY_TIMEOUT).group(1)
        yield base, model_id, record
    finally:
        for p in (proxy, server):
            if p is not None:
                p.stop()


def run_claude(base: str, model: str, prompt: str, tmp: Path, *extra: str, env_extra=None,
               timeout: float = CLAUDE_TIMEOUT) -> list[dict]:
    """``claude -p PROMPT`` offline against ``base``; returns the stream-json events."""
    home, work = tmp / "home", tmp / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": "x",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
        **(env_extra or {}),
    }
    argv = [CLAUDE, "-p", prompt, "--model", model, "--output-format", "stream-json", "--verbose", *extra]
    try:
        done = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as hung:  # (killed; what it had printed comes as bytes, whatever text= says)
        out, err = (p.decode(errors="replace") if isinstance(p, bytes) else p or "" for p in (hung.stdout, hung.stderr))
        raise AssertionError(f"claude did not finish within {timeout}s\nstdout:\n{out[-4000:]}\n"
                             f"stderr:\n{err[-4000:]}") from None
    events = []
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    assert done.returncode == 0, f"claude exited {done.returncode}\nstdout:\n{done.stdout[-4000:]}\n" \
                                 f"stderr:\n{done.stderr[-4000:]}"
    assert events and events[-1]["type"] == "result", done.stdout[-4000:]
    return events


def read_record(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def model_requests(record: list[dict]) -> list[dict]:
    return [r for r in record if r["method"] == "POST" and r["path"] == "/v1/messages"]


def blocks(events: list[dict], role: str, kind: str) -> list[dict]:
    out = []
    for e in events:
        if e.get("type") == role:
            content = e["message"]["content"]
            if isinstance(content, list):
                out += [b for b in content if b.get("type") == kind]
    return out


def request_lines(log: str) -> list[dict]:
    """The server's log line for each Messages generation: status, prompt tokens and the cache verdict."""
    out = []
    for m in re.finditer(r"POST /v1/messages (\d+) anthropic_messages(.*)", log):
        fields = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
        out.append({"status": int(m.group(1)), **fields})
    return out
