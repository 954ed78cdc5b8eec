"""Claude Code end to end: the real ``claude`` CLI against ``tinytitan serve --script``.

Each test starts ``python -m tinytitan serve --script FILE --port 0`` as a subprocess (the scripted backend:
request k gets entry k, the last repeats), puts ``tools/record_proxy.py`` in forward mode between it and
the client (so the test sees exactly what Claude Code sent), and runs ``claude -p ... --output-format
stream-json --verbose`` offline, with a fresh HOME, in a temporary working directory (tests/claude_harness.py).

Skipped when ``claude`` is not on PATH (``npm install -g @anthropic-ai/claude-code@2.1.337``).
"""

from __future__ import annotations

import json
import re
import sys
import uuid

import httpx
import pytest

from claude_harness import ROOT, blocks, model_requests, needs_claude, read_record, request_lines, run_claude, \
    tinytitan, tool_call

pytestmark = [
    pytest.mark.clients,
    needs_claude,
]


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
