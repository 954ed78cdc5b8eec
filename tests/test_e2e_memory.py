"""Memory end to end with the real Claude Code: two ``claude -p`` sessions in one project directory, against
``tinytitan serve --script … --memory``. The scripted model writes a fact in the first session and reads it in
the second; Claude Code sees neither memory call, only the answers.

Skipped when ``claude`` is not on PATH (``npm install -g @anthropic-ai/claude-code@2.1.337``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from claude_harness import CLAUDE, CLAUDE_TIMEOUT, ROOT, START_TIMEOUT, Proc, blocks, needs_claude, tool_call
from tinytitan.memory.workspace import Workspace
from tinytitan.store.db import SqliteDatabase, db_path

pytestmark = [
    pytest.mark.clients,
    needs_claude,
]

FACT = "make -j2 (the default target also rebuilds the docs)"


def claude(base: str, model: str, prompt: str, work: Path, home: Path) -> list[dict]:
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": "x",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_MAX_RETRIES": "1"}
    done = subprocess.run([CLAUDE, "-p", prompt, "--model", model, "--output-format", "stream-json", "--verbose"],
                          cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=CLAUDE_TIMEOUT)
    assert done.returncode == 0, f"claude exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip().startswith("{")]


def test_two_claude_code_sessions_share_a_fact(tmp_path):
    script = [tool_call("memory_set", {"key": "build/command", "value": FACT, "importance": 4}),
              "Noted for next time.",
              tool_call("memory_get", {"key": "build/command"}),
              "Build with make -j2."]
    script_file = tmp_path / "script.yaml"
    script_file.write_text(yaml.safe_dump(script))
    work = tmp_path / "work"
    work.mkdir()
    server = Proc([sys.executable, "-m", "tinytitan", "serve", "--script", str(script_file), "--port", "0",
                   "--memory", "--memory-dir", str(tmp_path / "memory"), "--log-level", "debug"], cwd=ROOT)
    try:
        m = server.wait_for(r"tinytitan is serving '([^']+)' at (http://\S+)", START_TIMEOUT)
        model, base = m.group(1), m.group(2)
        first = claude(base, model, "remember how to build this", work, tmp_path / "home1")
        second = claude(base, model, "how do I build this?", work, tmp_path / "home2")
    finally:
        server.stop()
    for events, answer in ((first, "Noted for next time."), (second, "Build with make -j2.")):
        assert events[-1]["type"] == "result" and events[-1]["result"] == answer, events[-1]
        assert events[-1]["num_turns"] == 1 and blocks(events, "assistant", "tool_use") == []
    db = SqliteDatabase(db_path(tmp_path / "memory"))
    (scope,) = [scope for scope, path in db.run(lambda tx: tx.rows("SELECT scope, path FROM memory_workspaces"))
                if (path or "").endswith("/work")]
    assert Workspace(db, scope).get("build/command").value == FACT  # the session's working directory's memory
    log = "".join(server.lines)
    assert "memory memory_get: ok" in log and FACT not in log  # sizes in the log, never contents
