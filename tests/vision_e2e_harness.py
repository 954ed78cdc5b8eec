"""The vision end-to-end tests' harness: ``tinytitan serve --model demo-vision`` (Vision: its log drained by a
thread, the request lines it printed, with the prompt tokens and cache each counted) and tools/record_proxy.py
in front of it (Proxy: recording requests and the server's whole replies, validated strictly against the
official SDKs' types)."""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import claude_harness as claude
import strict


ROOT = Path(__file__).resolve().parent.parent
MODEL = "demo-vision"
LINE = re.compile(r"(POST|GET) (\S+) (\d{3}) \S+ model=\S+ prompt=(\d+) cached=(\d+) .*?cache=(\S+)")


class Vision:
    """``tinytitan serve --model demo-vision`` (its log drained by a thread), shared by a module's tests."""

    def __init__(self, scratch: Path):
        self.proc = claude.Proc([sys.executable, "-m", "tinytitan", "serve", "--model", MODEL, "--port", "0",
                                 "--responses-store", "memory"], cwd=ROOT)
        with self.proc.starting():
            m = self.proc.wait_for(r"tinytitan is serving '([^']+)' at (http://\S+)", claude.START_TIMEOUT)
            assert m.group(1) == MODEL
            self.base = m.group(2)
            served = self.proc.wait_for(r'model_catalog_json = "([^"]+)"', 30).group(1)
            self.catalog = scratch / "model_catalog.json"  # this server's catalog, as it wrote it at start
            shutil.copy(served, self.catalog)

    def mark(self) -> int:
        return len(self.proc.lines)

    def requests_since(self, mark: int) -> list[dict]:
        """The request log lines (model requests) printed since ``mark``."""
        out = []
        for line in self.proc.lines[mark:]:
            m = LINE.search(line)
            if m and "tinytitan.requests" in line:
                out.append({"path": m.group(2), "status": int(m.group(3)), "prompt": int(m.group(4)),
                            "cached": int(m.group(5)), "cache": m.group(6), "line": line})
        return out

    def refusals_since(self, mark: int) -> list[str]:
        return [line for line in self.proc.lines[mark:] if re.search(r"tinytitan\.requests: \S+ \S+ [45]\d\d ", line)]

    def wait_requests(self, mark: int, n: int, timeout: float = 30) -> list[dict]:
        """The request log lines since ``mark`` once there are ``n``; fewer within ``timeout`` fails the test, with
        the server's last lines."""
        deadline = time.monotonic() + timeout
        while len(self.requests_since(mark)) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.requests_since(mark))} of {n} request lines within {timeout}s:\n"
                                     + "".join(self.proc.lines[-20:]))
            time.sleep(0.05)
        return self.requests_since(mark)


class Proxy:
    """tools/record_proxy.py in front of the server, recording requests and the server's whole replies."""

    def __init__(self, upstream: str, tmp: Path, *extra: str):
        self.requests, self.replies = tmp / "requests.jsonl", tmp / "replies.jsonl"
        self.proc = claude.Proc([sys.executable, str(ROOT / "tools" / "record_proxy.py"), "--upstream", upstream,
                                 "--port", "0", "--out", str(self.requests), "--replies", str(self.replies),
                                 *extra], cwd=ROOT)
        with self.proc.starting():
            self.base = self.proc.wait_for(r"listening on (http://\S+)", claude.PROXY_TIMEOUT).group(1)

    def recorded(self, path: str) -> list[dict]:
        return [r for r in claude.read_record(self.requests) if r["method"] == "POST" and r["path"] == path]

    def validate_replies(self, path: str) -> dict[int, bool]:
        """Every recorded reply, strictly (tests/strict.py: a stream cut short by the client up to its last whole
        event); → {request seq: whole} of the streams on ``path``."""
        streams = {}
        for r in claude.read_record(self.replies):
            strict.check_reply(r["method"], r["path"], r["anthropic"], r["status"], r["content_type"],
                               r["body"].encode())
            if r["path"] == path and r["content_type"].startswith("text/event-stream"):
                assert r["status"] == 200, r
                streams[r["seq"]] = r["complete"]
        return streams
