"""The real command: ``tinytitan serve`` in a subprocess, its banner, and the openai SDK against it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import ollama
import openai
import pytest

import strict
from cli_helpers import ROOT, start


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(['<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>',
                                "The time is noon."]))
    return path


def test_scripted_tool_call_parsed_by_the_sdk(script):
    proc, model, base, banner = start(["--script", str(script)])
    try:
        assert model == "tinytitan-scripted"
        assert "ANTHROPIC_BASE_URL=" + base in banner and f'base_url = "{base}/v1"' in banner
        c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
        r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "time?"}], tools=tools)
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "get_time" and json.loads(call.function.arguments) == {"tz": "UTC"}
        assert r.choices[0].finish_reason == "tool_calls"
        text = ""
        for chunk in c.chat.completions.create(model=model, messages=[{"role": "user", "content": "t"}],
                                               stream=True):
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
        assert text == "The time is noon."
        # the scripted backend's window fits Claude Code's 35–44k-token interactive prompts
        models = strict.openai_model_list(httpx.get(base + "/v1/models").json())
        assert [m.context_window for m in models] == [131072]
    finally:
        proc.terminate()
        proc.wait(10)


def test_ollama_client_tool_round_trip(script):
    """The banner's OLLAMA_HOST, the ``ollama`` client, a tool call and its result: a drop-in for Ollama."""
    proc, model, base, banner = start(["--script", str(script)])
    try:
        assert f"OLLAMA_HOST={base}" in banner
        c = ollama.Client(host=base)
        assert [m.model for m in c.list().models] == [model + ":latest"]
        tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
        messages = [{"role": "user", "content": "time?"}]
        r = c.chat(model=model + ":latest", messages=messages, tools=tools)
        (call,) = r.message.tool_calls
        assert call.function.name == "get_time" and call.function.arguments == {"tz": "UTC"}
        messages += [r.message, {"role": "tool", "content": "12:00", "tool_name": "get_time"}]
        text = "".join(p.message.content for p in c.chat(model=model, messages=messages, tools=tools, stream=True))
        assert text == "The time is noon."
    finally:
        proc.terminate()
        proc.wait(10)


def test_scripted_context_window_is_a_flag(script):
    from tinytitan.flags import build_parser
    from tinytitan.model_setup import make_backends

    args = build_parser().parse_args(["serve", "--script", str(script), "--context-window", "50000"])
    assert [b.context_window for b in make_backends(args)] == [50000]
    for bad in (["--context-window", "0", "--script", str(script)], ["--context-window", "9", "--model", "."]):
        with pytest.raises(SystemExit, match="--context-window"):
            make_backends(build_parser().parse_args(["serve", *bad]))


@pytest.mark.parametrize("interval, chunks", [("0", "one a token"), ("1000", "the first, then the rest")])
def test_stream_interval_is_a_flag(tmp_path, interval, chunks):
    """``--stream-interval 0`` streams each token as it is decoded; a long interval merges what was decoded
    meanwhile (the first delta still goes at once, the rest with the end: the end cuts the wait short)."""
    path = tmp_path / "slow.yaml"
    text = "one two three four five six seven eight"
    path.write_text(json.dumps([{"output": text, "delay_ms": 40}]))
    proc, model, base, _ = start(["--script", str(path), "--stream-interval", interval])
    try:
        body = {"model": model, "messages": [{"role": "user", "content": "count"}], "stream": True}
        started = time.perf_counter()
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        took = time.perf_counter() - started
        deltas = [c for c in map(strict.chat_chunk, events) if c.choices and c.choices[0].delta.content]
        assert "".join(c.choices[0].delta.content for c in deltas) == text
        if chunks == "one a token":
            assert len(deltas) >= 8
        else:
            assert len(deltas) == 2 and took < 1.0  # not the whole interval after the first delta
    finally:
        proc.terminate()
        proc.wait(10)
    with pytest.raises(SystemExit):
        from tinytitan.flags import build_parser

        build_parser().parse_args(["serve", "--stream-interval", "-1"])


def test_demo_model_serves_a_streaming_chat():
    proc, model, base, _ = start([])
    try:
        assert model == "tinytitan-demo"
        c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        chunks = list(c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}],
                                                max_tokens=5, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices[0].finish_reason in ("length", "stop", "tool_calls")
    finally:
        proc.terminate()
        proc.wait(10)


def test_ctrl_c_stops_the_server_quietly(script):
    import signal

    proc, model, base, banner = start(["--script", str(script)])
    c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    proc.send_signal(signal.SIGINT)  # (the client's keep-alive connection is still open)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # it served on: do not leave it behind
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0 and "Traceback" not in out and "SIGINT: shutting down" in out, out


def test_non_loopback_bind_needs_explicit_flag():
    r = subprocess.run([sys.executable, "-m", "tinytitan", "serve", "--host", "0.0.0.0", "--port", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--allow-remote" in r.stderr


def test_demo_model_command(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tinytitan", "demo-model", str(tmp_path / "m")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m" / "model.safetensors").is_file() and (tmp_path / "m" / "tokenizer.json").is_file()


def test_the_bound_address_is_an_allowed_host_even_on_another_loopback_address(script):
    """``--host 127.0.0.2``: the banner's address is the one clients use, and it was refused as a Host (403)."""
    proc, model, base, banner = start(["--script", str(script), "--host", "127.0.0.2"])
    try:
        assert base.startswith("http://127.0.0.2:")
        assert httpx.get(base + "/health").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
