"""Claude Code end to end: the real ``claude`` CLI against ``tinytitan serve --script``.

Each test starts ``python -m tinytitan serve --script FILE --port 0`` as a subprocess (the scripted backend:
request k gets entry k, the last repeats), puts ``tools/record_proxy.py`` in forward mode between it and
the client (so the test sees exactly what Claude Code sent), and runs ``claude -p ... --output-format
stream-json --verbose`` offline, with a fresh HOME, in a temporary working directory.

Skipped when ``claude`` is not on PATH (``npm install -g @anthropic-ai/claude-code@2.1.337``).
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
import uuid
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from conftest import needs

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = shutil.which("claude")

pytestmark = [
    pytest.mark.clients,
    needs(CLAUDE is None, reason="Claude Code (`claude`) is not installed: "
                                 "npm install -g @anthropic-ai/claude-code@2.1.337"),
]

START_TIMEOUT = 120  # server start (the first run may build the demo tokenizer)
CLAUDE_TIMEOUT = 120  # one `claude -p` run


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
        base = proxy.wait_for(r"listening on (http://\S+)", 30).group(1)
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


def test_plain_answer(tmp_path):
    text = "Hello from the tinytitan end-to-end test."
    with tinytitan([text], tmp_path) as (base, model, record):
        events = run_claude(base, model, "say hi", tmp_path)
    result = events[-1]
    assert result["subtype"] == "success" and result["is_error"] is False, result
    assert result["result"] == text
    assert [b["text"] for b in blocks(events, "assistant", "text")] == [text]
    reqs = model_requests(read_record(record))
    assert len(reqs) == 1
    assert reqs[0]["query"] == {"beta": ["true"]}
    assert reqs[0]["body"]["model"] == model and reqs[0]["body"]["stream"] is True


def test_tool_round_trip(tmp_path):
    marker = f"tinytitan-e2e-{uuid.uuid4().hex[:12]}"
    final = f"The command printed {marker}."
    script = [tool_call("Bash", {"command": f"echo {marker}", "description": "print a marker"}), final]
    with tinytitan(script, tmp_path) as (base, model, record):
        events = run_claude(base, model, "run the marker command", tmp_path)

    # the client saw the tool call ...
    uses = blocks(events, "assistant", "tool_use")
    assert len(uses) == 1, events
    use = uses[0]
    assert use["name"] == "Bash" and use["input"]["command"] == f"echo {marker}"
    # ... really ran it (the output is the marker, which appears nowhere else but the command line) ...
    results = blocks(events, "user", "tool_result")
    assert len(results) == 1, events
    res = results[0]
    assert res["tool_use_id"] == use["id"]
    assert res.get("is_error") is not True, res
    content = res["content"] if isinstance(res["content"], str) else \
        "".join(b.get("text", "") for b in res["content"])
    assert content.strip() == marker
    # ... and finished with the scripted final text
    result = events[-1]
    assert result["subtype"] == "success" and result["is_error"] is False, result
    assert result["result"] == final
    assert result["num_turns"] == 2

    # what went over the wire: the second request carries the assistant tool_use and the user tool_result
    reqs = model_requests(read_record(record))
    assert len(reqs) == 2, [r["path"] for r in read_record(record)]
    first, second = reqs[0]["body"], reqs[1]["body"]
    assert not any(b.get("type") == "tool_result" for m in first["messages"] if isinstance(m["content"], list)
                   for b in m["content"])
    sent_use = [b for m in second["messages"] if m["role"] == "assistant" and isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_use"]
    assert [(b["id"], b["name"], b["input"]["command"]) for b in sent_use] == [(use["id"], "Bash", f"echo {marker}")]
    sent_results = [b for m in second["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                    for b in m["content"] if b.get("type") == "tool_result"]
    assert len(sent_results) == 1
    sent = sent_results[0]
    assert sent["tool_use_id"] == use["id"]
    sent_text = sent["content"] if isinstance(sent["content"], str) else \
        "".join(b.get("text", "") for b in sent["content"])
    assert marker in sent_text
    assert sent.get("is_error") is not True


def test_context_counts_tokens(tmp_path):
    """``/context`` asks the server to count tokens (many POST /v1/messages/count_tokens) and no model turn."""
    with tinytitan(["unused"], tmp_path) as (base, model, record):
        events = run_claude(base, model, "/context", tmp_path)
        result = events[-1]
        assert result["subtype"] == "success" and result["is_error"] is False, result
        assert "Context Usage" in result["result"] and model in result["result"]
        rec = read_record(record)
        counts = [r for r in rec if r["method"] == "POST" and r["path"] == "/v1/messages/count_tokens"]
        assert counts, [r["path"] for r in rec]
        assert not model_requests(rec)
        # Claude Code falls back to estimates when counting fails, so check the server's answers directly
        keep = ("anthropic-version", "anthropic-beta", "content-type")
        with httpx.Client(base_url=base, timeout=30) as client:
            for r in counts:
                resp = client.post(r["path"], params=r["query"], json=r["body"],
                                   headers={k: v for k, v in r["headers"].items() if k in keep})
                assert resp.status_code == 200, (r["body"], resp.text)
                n = resp.json()["input_tokens"]
                assert isinstance(n, int) and n > 0


def test_thinking_round_trip(tmp_path):
    """Reasoning (``<think>``) comes out as a thinking block; Claude Code sends it back with the tool result."""
    marker = f"tinytitan-e2e-{uuid.uuid4().hex[:12]}"
    final = f"Done: {marker}."
    script = ["<think>\nI should print the marker.\n</think>\n\n"
              + tool_call("Bash", {"command": f"echo {marker}", "description": "print a marker"}),
              f"<think>\nIt printed.\n</think>\n\n{final}"]
    with tinytitan(script, tmp_path) as (base, model, record):
        events = run_claude(base, model, "print the marker", tmp_path)
    thoughts = [b["thinking"] for b in blocks(events, "assistant", "thinking")]
    assert [t.strip() for t in thoughts] == ["I should print the marker.", "It printed."], events
    results = blocks(events, "user", "tool_result")
    assert len(results) == 1 and marker in str(results[0]["content"]), results
    assert events[-1]["is_error"] is False and events[-1]["result"] == final, events[-1]

    reqs = model_requests(read_record(record))
    assert len(reqs) == 2
    sent = [b for m in reqs[1]["body"]["messages"] if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]]
    assert [b["type"] for b in sent] == ["thinking", "tool_use"], sent
    assert sent[0]["thinking"].strip() == "I should print the marker."


def test_a_long_session_compacts_inside_the_window_the_banner_gives(tmp_path):
    """--context-window 65536 (Claude Code 2.1.332's own first prompt is 18.5-20.8k tokens: a 16k window cannot
    hold even that) and the environment the banner prints: file reads fill the window and Claude Code compacts on its own
    (its summary is the text the scripted turns start with) before the server ever refuses a prompt."""
    files = []
    for k in range(4):
        path = tmp_path / "work" / f"big{k}.txt"
        files.append(path)
    calls = [f"Reading big{k}.txt.\n" + tool_call("Read", {"file_path": str(path)}) for k, path in enumerate(files)]
    banner: list = []
    with tinytitan(calls + ["All files are read."], tmp_path, ["--context-window", "65536"], banner) as (base, model, _):
        server = banner.pop()
        line = next(line for line in banner if "claude --model" in line)
        env = dict(re.findall(r"(CLAUDE_\w+)=(\S+)", line))
        assert set(env) == {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
                            "CLAUDE_CODE_AUTO_COMPACT_WINDOW", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"}, line
        (tmp_path / "work").mkdir()
        for k, path in enumerate(files):
            path.write_text("\n".join(f"file {k} line {i}: " + "lorem ipsum dolor sit amet consectetur " * 3
                                       for i in range(300)))
        events = run_claude(base, model, "read the big files", tmp_path, "--allowedTools", "Read",
                            env_extra={**env, "HOME": str(tmp_path / "home")})
        log = "".join(server.lines)
    compactions = [e for e in events if e.get("subtype") == "status" and "compact_result" in e]
    assert compactions and all(e["compact_result"] == "success" for e in compactions), compactions
    lines = re.findall(r"POST /v1/messages (\d+) anthropic_messages(?: model=\S+ prompt=(\d+))?", log)
    assert lines and all(status == "200" for status, _ in lines), lines  # nothing refused as too long
    assert max(int(p) for _, p in lines if p) <= 65536
    assert events[-1]["type"] == "result" and not events[-1]["is_error"], events[-1]


def request_lines(log: str) -> list[dict]:
    """The server's log line for each Messages generation: status, prompt tokens and the cache verdict."""
    out = []
    for m in re.finditer(r"POST /v1/messages (\d+) anthropic_messages(.*)", log):
        fields = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
        out.append({"status": int(m.group(1)), **fields})
    return out


def test_tool_search_loads_an_mcp_tool_without_a_refusal_or_a_cache_miss(tmp_path):
    """2.1.332 defers MCP tools behind ToolSearch: its result is a tool_reference, which the server serves (the
    tool's definition appended inside the result): no request refused, every turn after the first a cache hit,
    the prompt at its deferred size (it never grows to every tool declared in full)."""
    marker = f"tinytitan-e2e-{uuid.uuid4().hex[:12]}"
    script = [tool_call("ToolSearch", {"query": "select:mcp__demo__echo"}),
              tool_call("mcp__demo__echo", {"text": marker}), f"The tool said {marker}."]
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"demo": {"command": sys.executable,
                                                          "args": [str(ROOT / "tests" / "mcp_echo.py")]}}}))
    banner: list = []
    with tinytitan(script, tmp_path, banner=banner) as (base, model, record):
        server = banner.pop()
        events = run_claude(base, model, "echo the marker with the demo tool", tmp_path, "--mcp-config", str(config),
                            "--allowedTools", "mcp__demo__echo")
        log = "".join(server.lines)
    assert events[-1]["is_error"] is False and events[-1]["result"] == f"The tool said {marker}.", events[-1]
    results = [r["content"] for r in blocks(events, "user", "tool_result")]
    assert results[0] == [{"type": "tool_reference", "tool_name": "mcp__demo__echo"}], results
    assert marker in str(results[1])
    reqs = model_requests(read_record(record))
    assert len(reqs) == 3, [r["body"]["messages"][-1] for r in reqs]  # no retry, no fallback without tool search
    assert any(t.get("defer_loading") and t["name"] == "mcp__demo__echo" for t in reqs[1]["body"]["tools"])
    lines = request_lines(log)
    assert [line["status"] for line in lines] == [200, 200, 200], lines
    assert [line["cache"] for line in lines[1:]] == ["hit", "hit"], lines
    first, last = int(lines[0]["prompt"]), int(lines[-1]["prompt"])
    assert last - first < 1000, lines  # the turns appended; no tool header declaring every tool in full
