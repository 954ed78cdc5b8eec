"""The launch tests' helpers: ``python -m tinytitan launch`` run as a person would (a fresh HOME, its
environment), each agent's flags for one non-interactive turn and its install command, the port launch says it
bound, and a scripted ``tinytitan serve`` on a free port (Server) whose answer is ANSWER."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx


ROOT = Path(__file__).resolve().parent.parent
ANSWER = "Hello from tinytitan launch."
START_TIMEOUT = 120
AGENT_TIMEOUT = 240

# the agent's own flags for one non-interactive turn (what a user would type after `--`)
TURN = {
    "claude": ["-p", "say hi"],
    "codex": ["exec", "--skip-git-repo-check", "say hi"],
    "opencode": ["run", "say hi"],
    "pi": ["-p", "say hi"],
    "aider": ["--no-git", "--yes-always", "--no-pretty", "--no-fancy-input", "main.py", "--message", "say hi"],
    "qwen-code": ["-p", "say hi"],
}
INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code", "codex": "npm install -g @openai/codex@0.171.0",
    "opencode": "npm install -g opencode-ai@1.18.33", "pi": "npm install -g @mariozechner/pi-coding-agent@0.73.1",
    "aider": "aider-chat 0.86 in a venv of its own (.ci/run)", "qwen-code": "npm install -g @qwen-code/qwen-code@0.15.10",
}


def launched_port(stderr: str) -> int:
    """The port the server ``launch --port 0`` started bound, as launch says it."""
    said = re.search(r"tinytitan serve is listening on http://127\.0\.0\.1:(\d+)", stderr)
    assert said, stderr
    return int(said.group(1))


def env_for(home: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "HOME": str(home), "TINYTITAN_CACHE": str(home / "tt-cache"),
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_STATE_HOME": str(home / ".local/state"), "XDG_CACHE_HOME": str(home / ".cache"),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT), "PYTHONUNBUFFERED": "1"}


def launch(args: list[str], home: Path, cwd: Path, timeout: float = AGENT_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinytitan", "launch", *args], cwd=cwd, env=env_for(home),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


class Server:
    """``tinytitan serve --script`` on a free port it binds itself (its banner names it), its log in a file."""

    def __init__(self, tmp: Path, *extra: str):
        self.port, self.base = 0, ""
        script = tmp / "script.yaml"
        script.write_text(f'- "{ANSWER}"\n')
        self.log = tmp / "serve.log"
        with open(self.log, "wb") as out:  # (the server holds its own copy of the descriptor)
            self.proc = subprocess.Popen([sys.executable, "-m", "tinytitan", "serve", "--script", str(script),
                                          "--port", "0", *extra], cwd=tmp, env=env_for(tmp),
                                         stdout=out, stderr=subprocess.STDOUT)
        try:
            self._wait()
        except BaseException:  # (a start that fails stops the server: no one else holds it to stop)
            self.stop()
            raise

    def _wait(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            bound = re.search(r"^tinytitan is serving '.*' at (http://127\.0\.0\.1:(\d+))$", self.log.read_text(),
                              re.M)
            if bound is None:
                time.sleep(0.1)
                continue
            self.base, self.port = bound.group(1), int(bound.group(2))
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("the scripted server did not start:\n" + self.log.read_text())

    def prompts_since(self, offset: int) -> list[int]:
        text = self.log.read_text()[offset:]
        return [int(m) for m in re.findall(r" 200 \S+ model=\S+ prompt=(\d+)", text)]

    def mark(self) -> int:
        return len(self.log.read_text())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
