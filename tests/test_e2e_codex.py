"""Codex CLI end to end: ``codex exec`` against ``tinytitan serve --script`` in a subprocess.

Between them sits ``tools/record_proxy.py`` in forward mode, so each test also sees what Codex sent.
Every run gets a fresh HOME, CODEX_HOME and working directory and a bounded timeout; Codex is told not
to retry (``request_max_retries = stream_max_retries = 0``), so one failure is one request.

The same scenarios re-record the replayed traces under ``tests/traces/codex`` (fixed scratch paths
under /tmp/tt-trace, so no machine paths land in the bodies)::

    python tests/test_e2e_codex.py record            # from the repository root
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import needs
from codex_harness import CODEX, ROOT, explain_run, recording_proxy, run_codex, scripted_server, socket_recorder


pytestmark = [
    pytest.mark.clients,
    needs(CODEX is None, reason="Codex CLI not installed (npm install -g @openai/codex@0.171.0)"),
]

MARKER = "tinytitan-codex-marker"
TOOL_CMD = f"echo {MARKER} > marker.txt; echo done"
TOOL_CALL = ('<tool_call>\n{"name": "exec_command", "arguments": {"cmd": ' + json.dumps(TOOL_CMD)
             + "}}\n</tool_call>")  # in the template's layout, as the call mask writes it (Codex's turn limits its calls)

# name → (script, prompt); the recorded traces are these runs
SCENARIOS = {
    "plain": (["Hello from tinytitan, via Codex."], "say hi"),
    "tool_round_trip": ([TOOL_CALL, "The marker file is written."], "write the marker file"),
    "reasoning_round_trip": (["<think>\nThe user wants the marker file; run echo.\n</think>\n\n" + TOOL_CALL,
                              "<think>\nThe command succeeded.\n</think>\n\nDone: marker.txt holds the marker."],
                             "write the marker file"),
}


def run_scenario(script: list, prompt: str, root: Path, trace: Path, server_args=(), codex_args=()):
    """Server + proxy + codex; → (completed process, recorded requests, served model id)."""
    scratch = root / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    with scripted_server(script, scratch, server_args) as (server, model), recording_proxy(server, trace, scratch) as proxy:
        result = run_codex(proxy, model, root, prompt, *codex_args)
    requests = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return result, requests, model


def _input_items(request, kind):
    return [i for i in request["body"]["input"] if i.get("type") == kind]


def test_plain_answer(tmp_path):
    script, prompt = SCENARIOS["plain"]
    result, requests, model = run_scenario(script, prompt, tmp_path, tmp_path / "trace.jsonl")
    assert result.returncode == 0, explain_run(result)
    assert result.stdout.strip() == script[0], explain_run(result)
    assert [(r["method"], r["path"]) for r in requests] == [("POST", "/v1/responses")]
    body = requests[0]["body"]
    assert body["model"] == model and body["stream"] is True and body["store"] is False
    users = [c["text"] for m in _input_items(requests[0], "message") if m["role"] == "user" for c in m["content"]]
    assert users[-1] == prompt


def test_tool_round_trip(tmp_path):
    script, prompt = SCENARIOS["tool_round_trip"]
    result, requests, _ = run_scenario(script, prompt, tmp_path, tmp_path / "trace.jsonl")
    assert result.returncode == 0, explain_run(result)
    # the schema the scripted call relies on: exec_command takes the command line as a string `cmd`
    tools = {t.get("name"): t for t in requests[0]["body"]["tools"]}
    assert tools["exec_command"]["parameters"]["properties"]["cmd"]["type"] == "string"
    assert "cmd" in tools["exec_command"]["parameters"]["required"]
    # Codex ran the command in its working directory ...
    assert (tmp_path / "work" / "marker.txt").read_text().strip() == MARKER
    # ... and sent the result back: the call as it got it, then its output under the same call_id
    assert len(requests) == 2, [r["path"] for r in requests]
    assert not _input_items(requests[0], "function_call_output")
    calls, outputs = _input_items(requests[1], "function_call"), _input_items(requests[1], "function_call_output")
    assert len(calls) == 1 and len(outputs) == 1
    assert calls[0]["name"] == "exec_command" and json.loads(calls[0]["arguments"]) == {"cmd": TOOL_CMD}
    assert outputs[0]["call_id"] == calls[0]["call_id"] and "done" in outputs[0]["output"]
    assert result.stdout.strip() == script[1], explain_run(result)


def test_reasoning_round_trip(tmp_path):
    """A thinking model: Codex gets the reasoning item and sends it back next turn, the tool call too."""
    script, prompt = SCENARIOS["reasoning_round_trip"]
    result, requests, _ = run_scenario(script, prompt, tmp_path, tmp_path / "trace.jsonl")
    assert result.returncode == 0, explain_run(result)
    assert (tmp_path / "work" / "marker.txt").read_text().strip() == MARKER
    assert len(requests) == 2
    reasoning = _input_items(requests[1], "reasoning")
    assert len(reasoning) == 1
    assert [c["text"] for c in reasoning[0]["content"]] == ["The user wants the marker file; run echo.\n"]
    assert len(_input_items(requests[1], "function_call_output")) == 1
    assert result.stdout.strip() == "Done: marker.txt holds the marker.", explain_run(result)


PATCH = """*** Begin Patch
*** Update File: hello.txt
@@
-hello
+hello, patched
*** End Patch"""


def catalog_entry(model: str) -> dict:
    """A model catalog entry (``model_catalog_json``) for the served model. Codex gives its freeform
    ``apply_patch`` (a ``custom`` tool with a Lark grammar) only to a model whose catalog entry says
    ``apply_patch_tool_type: freeform``; a provider's model it does not know gets fallback metadata, and
    no apply_patch at all. These are the fields Codex 0.171 requires of an entry."""
    return {"slug": model, "display_name": model, "base_instructions": "You are a coding agent.",
            "apply_patch_tool_type": "freeform", "shell_type": "shell_command", "visibility": "list",
            "supported_in_api": True, "priority": 1, "supported_reasoning_levels": [],
            "truncation_policy": {"mode": "tokens", "limit": 10000}, "context_window": 32768,
            "support_verbosity": False, "experimental_supported_tools": []}


def test_apply_patch_round_trip(tmp_path):
    """The model patches a file through Codex's freeform apply_patch: the call reaches Codex as a
    custom_tool_call, Codex applies it in its working directory and sends a custom_tool_call_output back."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "hello.txt").write_text("hello\n")
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [catalog_entry("tinytitan-scripted")]}))
    # as the mask lets the model write it: the template's spaced JSON, the input's one spelling
    call = ('<tool_call>\n{"name": "apply_patch", "arguments": {"input": ' + json.dumps(PATCH, ensure_ascii=False)
            + "}}\n</tool_call>")
    script = [call, "hello.txt is patched."]
    result, requests, model = run_scenario(script, "patch hello.txt", tmp_path, tmp_path / "trace.jsonl",
                                           codex_args=["-c", f"model_catalog_json={json.dumps(str(catalog))}"])
    assert model == "tinytitan-scripted"
    assert result.returncode == 0, explain_run(result)
    (tool,) = [t for t in requests[0]["body"]["tools"] if t.get("name") == "apply_patch"]
    assert tool["type"] == "custom" and tool["format"]["type"] == "grammar" and tool["format"]["syntax"] == "lark"
    # the file changed: Codex applied the patch
    assert (tmp_path / "work" / "hello.txt").read_text() == "hello, patched\n"
    assert len(requests) == 2, [r["path"] for r in requests]
    calls = _input_items(requests[1], "custom_tool_call")
    outputs = _input_items(requests[1], "custom_tool_call_output")
    assert len(calls) == 1 and calls[0]["name"] == "apply_patch" and calls[0]["input"] == PATCH
    assert len(outputs) == 1 and outputs[0]["call_id"] == calls[0]["call_id"]
    assert "hello.txt" in json.dumps(outputs[0]["output"]), outputs[0]
    assert result.stdout.strip() == script[1], explain_run(result)


def test_the_servers_catalog_gives_codex_the_models_metadata(tmp_path):
    """The model_catalog_json the server writes at start (and its banner names): Codex gives no fallback-metadata
    warning, offers its freeform apply_patch, and its first prompt shrinks (the catalog's short instructions)."""
    script, prompt = SCENARIOS["plain"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    trace = tmp_path / "trace.jsonl"
    with scripted_server(script, scratch) as (server, model), recording_proxy(server, trace, scratch) as proxy:
        banner = (scratch / "server.log").read_text()
        (catalog,) = set(re.findall(r'model_catalog_json = "([^"]+)"', banner))
        entry = json.loads(Path(catalog).read_text())["models"][0]
        assert entry["slug"] == model and entry["context_window"] == 131072  # the scripted backend's window
        without = run_codex(proxy, model, tmp_path / "without", prompt)
        with_catalog = run_codex(proxy, model, tmp_path / "with", prompt, "-c",
                                 f"model_catalog_json={json.dumps(catalog)}")
        log = (scratch / "server.log").read_text()
    assert without.returncode == 0 and with_catalog.returncode == 0, explain_run(with_catalog)
    assert "Defaulting to fallback metadata" in without.stderr
    assert "Model metadata" not in with_catalog.stderr and "fallback" not in with_catalog.stderr, \
        explain_run(with_catalog)
    first, second = [json.loads(line) for line in trace.read_text().splitlines()]
    assert "apply_patch" not in {t.get("name") for t in first["body"]["tools"]}
    (patch,) = [t for t in second["body"]["tools"] if t.get("name") == "apply_patch"]
    assert patch["type"] == "custom" and patch["format"]["syntax"] == "lark"
    # the entry says summaries and verbosity work here: Codex asks for a reasoning summary (and shows it)
    assert (second["body"].get("reasoning") or {}).get("summary") not in (None, "none"), second["body"].get("reasoning")
    prompts = [int(n) for n in re.findall(r"POST /v1/responses 200 openai_responses model=\S+ prompt=(\d+)", log)]
    assert len(prompts) == 2 and prompts[1] < prompts[0] * 0.7, prompts  # 14,1xx tokens → 8,2xx


def test_a_long_session_compacts_inside_a_small_window(tmp_path):
    """--context-window 16384 and the catalog the server writes: long tool results fill the window, and Codex
    compacts on its own (its catalog entry's auto-compaction limit) before the server ever refuses a prompt."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "big.txt").write_text(
        "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet consectetur " * 3 for i in range(600)))
    call = '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "cat big.txt"}}\n</tool_call>'
    script = [call] * 4 + ["All four reads are done."]
    trace = tmp_path / "trace.jsonl"
    with scripted_server(script, scratch, ["--context-window", "16384"]) as (server, model), \
            recording_proxy(server, trace, scratch) as proxy:
        (catalog,) = set(re.findall(r'model_catalog_json = "([^"]+)"', (scratch / "server.log").read_text()))
        assert json.loads(Path(catalog).read_text())["models"][0]["context_window"] == 16384
        result = run_codex(proxy, model, tmp_path, "read big.txt four times", "-c",
                           f"model_catalog_json={json.dumps(catalog)}")
        log = (scratch / "server.log").read_text()
    assert result.returncode == 0, explain_run(result)
    assert "context compacted" in result.stdout + result.stderr, explain_run(result)
    lines = re.findall(r"POST /v1/responses (\d+) openai_responses(?: model=\S+ prompt=(\d+))?", log)
    assert lines and all(status == "200" for status, _ in lines), lines  # nothing refused as too long
    prompts = [int(p) for _, p in lines if p]
    assert max(prompts) <= 16384 and any(b < a for a, b in zip(prompts, prompts[1:])), prompts  # it shrank
    requests = [json.loads(line) for line in trace.read_text().splitlines()]
    assert any(not r["body"].get("tools") for r in requests), "no compaction request (one offering no tools)"


def test_failed_generation_is_reported(tmp_path):
    """A generation that fails mid-stream (response.failed) ends the run with the server's message."""
    script = [{"output": "partial answer", "error": "boom"}]
    result, requests, _ = run_scenario(script, "say hi", tmp_path, tmp_path / "trace.jsonl")
    assert result.returncode != 0, explain_run(result)
    assert "generation failed: boom" in result.stderr, explain_run(result)
    assert len(requests) == 1  # retries off: the failure is not retried


def test_incomplete_response_is_reported(tmp_path):
    """Output that runs into the context window ends as response.incomplete; Codex's stream parser reads it
    and reports the reason (it neither hangs nor treats the stream as broken)."""
    # ≈ 8k tokens on top of Codex's ≈ 14k-token prompt: past a 20k window (a 32k one took 18k tokens to fill)
    script = ["word " * 8000]
    result, requests, _ = run_scenario(script, "say hi", tmp_path, tmp_path / "trace.jsonl",
                                       ["--context-window", "20000"])
    assert result.returncode != 0, explain_run(result)
    assert "Incomplete response returned, reason: max_output_tokens" in result.stderr, explain_run(result)
    assert len(requests) == 1


def run_socket_scenario(script: list, prompt: str, root: Path, trace: Path, server_args=(), codex_args=()):
    """Server + WebSocket recorder + codex on its built-in provider → (completed process, recorded events,
    server log text, wall seconds of the codex run)."""
    scratch = root / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    with scripted_server(script, scratch, server_args) as (server, model), \
            socket_recorder(server, trace, scratch) as proxy:
        result = run_codex(proxy, model, root, prompt, *codex_args, builtin=True)
    events = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return result, events, (scratch / "server.log").read_text(), result.wall


def test_builtin_provider_tool_round_trip_over_the_websocket(tmp_path):
    """Codex's own openai provider (openai_base_url): one WebSocket, a prewarm and a tool round trip on it,
    chained by previous_response_id with only the new input (store: false); no reconnect, no HTTP fallback,
    and no stall: not much slower than the same turn through a custom provider (HTTP). (Loose: both runs start
    a Codex process, whose own start-up time on a loaded machine swings by seconds.)"""
    script, prompt = SCENARIOS["tool_round_trip"]
    result, events, server_log, wall = run_socket_scenario(script, prompt, tmp_path / "ws", tmp_path / "ws.jsonl")
    assert result.returncode == 0, explain_run(result)
    assert (tmp_path / "ws" / "work" / "marker.txt").read_text().strip() == MARKER
    assert result.stdout.strip() == script[1], explain_run(result)
    assert "Reconnecting" not in result.stderr and "falling back" not in result.stderr.lower(), explain_run(result)
    kinds = [e["event"] for e in events]
    assert kinds.count("upgrade") == 1 and "http" not in kinds, kinds  # one socket, no HTTP request at all
    (upgrade,) = [e for e in events if e["event"] == "upgrade"]
    assert upgrade["path"] == "/v1/responses" and "responses_websockets=" in upgrade["headers"]["openai-beta"]
    creates = [e["frame"] for e in events if e["event"] == "client" and e["frame"]["type"] == "response.create"]
    finals = [e["frame"] for e in events if e["event"] == "server" and e["frame"]["type"].startswith("response.")
              and e["frame"]["type"] in ("response.completed", "response.failed", "response.incomplete")]
    assert len(finals) == len(creates) >= 2 and all(f["type"] == "response.completed" for f in finals), finals
    assert not [e for e in events if e["event"] == "server" and e["frame"]["type"] == "error"]
    last = creates[-1]  # the call's output, chained to the response that made the call: only the new input
    assert last["store"] is False and last["previous_response_id"] == finals[-2]["response"]["id"]
    assert [i["type"] for i in last["input"]] == ["function_call_output"], last["input"]
    # the server saw the same: one upgrade, each turn an exchange on it, no POST
    assert server_log.count("GET /v1/responses 101") == 1 and "POST /v1/responses" not in server_log
    assert server_log.count("WS /v1/responses 200") == len(creates)
    over_http, _, _ = run_scenario(script, prompt, tmp_path / "http", tmp_path / "http.jsonl")
    assert over_http.returncode == 0
    assert wall <= 1.5 * over_http.wall + 5.0, (wall, over_http.wall)


def test_builtin_provider_falls_back_at_once_without_the_websocket(tmp_path):
    """--no-websocket: the upgrade is 426 and Codex goes to HTTP after that one attempt."""
    script, prompt = SCENARIOS["plain"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with scripted_server(script, scratch, ["--no-websocket"]) as (server, model):
        result = run_codex(server, model, tmp_path, prompt, builtin=True)
        wall = result.wall
    server_log = (scratch / "server.log").read_text()
    assert result.returncode == 0 and result.stdout.strip() == script[0], explain_run(result)
    assert server_log.count("GET /v1/responses 426") == 1 and server_log.count("POST /v1/responses 200") == 1
    assert "Reconnecting" not in result.stderr and wall < 30, explain_run(result)  # no retry backoff (loose: load)


def trim_socket_trace(path: Path) -> None:
    """A recorded exchange as kept under tests/traces: the client's frames whole, the server's reduced to what a
    replay compares (type, numbering, item types, the response's id and status)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        if r["event"] == "server":
            f = r["frame"]
            kept = {k: f[k] for k in ("type", "sequence_number", "output_index", "status") if k in f}
            if isinstance(f.get("item"), dict):
                kept["item"] = {"type": f["item"]["type"]}
            if isinstance(f.get("response"), dict):
                kept["response"] = {"id": f["response"]["id"], "status": f["response"]["status"]}
            r["frame"] = kept
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


TOOL_SEARCH_SCRIPT = ['<tool_call>\n{"name": "tool_search", "arguments": {"query": "echo"}}\n</tool_call>',
                      '<tool_call>\n{"name": "mcp__demo__echo", "arguments": {"text": "' + MARKER + '"}}\n</tool_call>',
                      f"The tool said {MARKER}."]
TOOL_SEARCH_PROMPT = "echo the marker with the demo tool"


def run_tool_search(root: Path, trace: Path):
    """Codex with the server's catalog and one stdio MCP server (tests/mcp_echo.py) → (result, server log)."""
    scratch = root / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    with scripted_server(TOOL_SEARCH_SCRIPT, scratch) as (server, model), \
            recording_proxy(server, trace, scratch) as proxy:
        (catalog,) = set(re.findall(r'model_catalog_json = "([^"]+)"', (scratch / "server.log").read_text()))
        mcp = (f'mcp_servers.demo={{command = "{sys.executable}", args = ["{ROOT / "tests" / "mcp_echo.py"}"], '
               'required = true}')  # its tools are listed before the first request
        result = run_codex(proxy, model, root, TOOL_SEARCH_PROMPT,
                           "-c", f"model_catalog_json={json.dumps(catalog)}", "-c", mcp)
    return result, (scratch / "server.log").read_text()


def test_tool_search_loads_an_mcp_tool(tmp_path):
    """With the server's catalog (``supports_search_tool``) Codex offers a client-executed ``tool_search`` and defers
    its MCP tools: the model's search comes back as a ``tool_search_call`` item, Codex answers with a
    ``tool_search_output`` (the MCP server's namespace), and the loaded tool is called and run. (The calls are
    written as the family's template writes them, the layout the scripted backend's call grammar holds calls to.)"""
    trace = tmp_path / "trace.jsonl"
    result, log = run_tool_search(tmp_path, trace)
    assert result.returncode == 0, explain_run(result)
    assert result.stdout.strip() == TOOL_SEARCH_SCRIPT[2], explain_run(result)
    requests = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(requests) == 3, [r["path"] for r in requests]
    search = [t for t in requests[0]["body"]["tools"] if t["type"] == "tool_search"]
    assert search and search[0]["execution"] == "client"
    assert not any("echo" in json.dumps(t) for t in requests[0]["body"]["tools"])  # deferred: not declared yet
    (output,) = _input_items(requests[1], "tool_search_output")
    assert output["tools"][0]["name"] == "mcp__demo" and output["tools"][0]["tools"][0]["name"] == "echo"
    (call,) = _input_items(requests[2], "function_call")
    assert (call["namespace"], call["name"]) == ("mcp__demo", "echo")
    (result_item,) = _input_items(requests[2], "function_call_output")
    assert MARKER in json.dumps(result_item["output"])
    statuses = re.findall(r"POST /v1/responses (\d+) openai_responses", log)
    assert statuses == ["200", "200", "200"], statuses
    # loading the tool appended to the prompt: every turn after the first reuses the whole cached prefix
    assert re.findall(r"POST /v1/responses \d+ .*? cache=(\S+)", log)[1:] == ["hit", "hit"], log


def record(out_dir: Path = ROOT / "tests" / "traces" / "codex", scratch: Path = Path("/tmp/tt-trace")) -> None:
    """Re-record every scenario's trace (the recorded bodies hold /tmp/tt-trace/work as the cwd)."""
    for name, (script, prompt) in SCENARIOS.items():
        if scratch.exists():
            shutil.rmtree(scratch)
        out = out_dir / f"{name}.jsonl"
        out.unlink(missing_ok=True)
        result, requests, _ = run_scenario(script, prompt, scratch, out)
        print(f"{out.relative_to(ROOT)}: rc={result.returncode}, {len(requests)} request(s); "
              f"final message {result.stdout.strip()!r}")
        if result.returncode != 0:
            raise SystemExit(explain_run(result))
    # tool search through an MCP tool, with the server's catalog
    if scratch.exists():
        shutil.rmtree(scratch)
    out = out_dir / "tool_search.jsonl"
    out.unlink(missing_ok=True)
    result, _ = run_tool_search(scratch, out)
    print(f"{out.relative_to(ROOT)}: rc={result.returncode}; final message {result.stdout.strip()!r}")
    if result.returncode != 0:
        raise SystemExit(explain_run(result))
    # the WebSocket exchange of Codex's built-in provider (tools/record_socket.py's format)
    script, prompt = SCENARIOS["tool_round_trip"]
    if scratch.exists():
        shutil.rmtree(scratch)
    out = out_dir.parent / "codex_websocket" / "tool_round_trip.jsonl"
    out.parent.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    result, events, _, _ = run_socket_scenario(script, prompt, scratch, out)
    trim_socket_trace(out)
    print(f"{out.relative_to(ROOT)}: rc={result.returncode}, {len(events)} event(s)")
    if result.returncode != 0:
        raise SystemExit(explain_run(result))


if __name__ == "__main__":
    if sys.argv[1:] != ["record"] or CODEX is None:
        raise SystemExit("usage: python tests/test_e2e_codex.py record   (needs `codex` on PATH)")
    record()

