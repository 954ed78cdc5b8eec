"""``tinytitan launch AGENT``: every agent that installs offline runs a plain turn through it, against the
scripted backend, with the settings launch gives it and nothing written to the user's own configuration.

The agents are run as a person would: ``python -m tinytitan launch AGENT --port P -- <the agent's own
non-interactive flags>``, in an empty working directory with a fresh HOME. Most tests share one scripted server
(launch reuses it); one lets launch start and stop its own. The first prompt each agent sent is checked against
the sizes launch warns with (``tinytitan/launch/fit.py``), so that table cannot drift from what the agents send.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import httpx
import pytest

from claude_harness import needs_claude
from conftest import absent, needs
from tinytitan import agents
from tinytitan.launch.fit import FIRST_PROMPT, first_prompt_tokens, misfit
from tinytitan.launch.settings import AGENTS, PROGRAMS, Served, invocation
from launch_helpers import ANSWER, INSTALL, START_TIMEOUT, Server, TURN, env_for, launch, launched_port


# what each agent keeps in the user's home as its configuration: launch must leave these alone
USER_CONFIG = {
    "claude": [".claude/settings.json"], "codex": [".codex/config.toml"], "opencode": [".config/opencode/opencode.json"],
    "pi": [".pi/agent/models.json", ".pi/agent/settings.json"], "aider": [".aider.conf.yml", ".aider.model.metadata.json"],
    "qwen-code": [".qwen/settings.json"],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()


@pytest.mark.clients
@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_runs_a_plain_turn_through_launch(agent, server, tmp_path):
    if shutil.which(PROGRAMS[agent]) is None:
        absent(f"{agent} (`{PROGRAMS[agent]}`) is not installed: {INSTALL[agent]}")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "main.py").write_text("x = 1\n")
    mark = server.mark()
    done = launch([agent, "--port", str(server.port), "--", *TURN[agent]], home, work)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"using the server already running at {server.base}" in done.stderr
    assert ANSWER in out, out
    for path in USER_CONFIG[agent]:
        assert not (home / path).exists(), f"launch wrote the user's {path}"
    analytics = home / ".aider" / "analytics.json"  # aider's own state: launch turns analytics off for this run only
    assert not analytics.exists() or '"permanently_disable": true' not in analytics.read_text()
    prompts = server.prompts_since(mark)
    assert prompts, "the agent sent no request"
    measured, table = max(prompts), first_prompt_tokens(agent)
    assert 0.75 * table <= measured <= table, (
        f"{agent}'s first prompt is {measured} tokens; tinytitan/launch/fit.py says {table} ({FIRST_PROMPT[agent][1]})")


def test_print_shows_what_would_run_and_runs_nothing(server, tmp_path):
    mark = server.mark()
    done = launch(["codex", "--port", str(server.port), "--print"], tmp_path, tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "TINYTITAN_API_KEY=local" in out
    assert f'model_providers.tinytitan.base_url="{server.base}/v1"' in out
    assert 'model="tinytitan-scripted"' in out and "model_catalog_json=" in out
    assert '"context_window": 131072' in out  # the catalog it would write
    assert server.prompts_since(mark) == []
    catalog = tmp_path / "tt-cache" / "launch" / "codex" / "model_catalog.json"  # written: the printed line works
    assert f"# {catalog} (written):" in out and '"slug": "tinytitan-scripted"' in catalog.read_text()


def test_a_server_serving_another_model_is_not_taken_for_it(server, tmp_path):
    done = launch(["pi", "--port", str(server.port), "--model-id", "qwen3-8b", "--print"], tmp_path, tmp_path,
                  timeout=60)
    assert done.returncode == 1
    assert f"the server on {server.base} serves tinytitan-scripted, not qwen3-8b" in done.stderr


def test_a_script_asked_for_is_not_taken_for_another_model_on_the_port():
    """`launch AGENT --script FILE` asks for the scripted backend: a server on the port serving a real model is
    refused by name, as for --model, instead of the agent running on that model with only a note."""
    from tinytitan.launch.command import _pick, parse
    from tinytitan.launch.server import LaunchError

    _, ns, _, _ = parse(["claude", "--script", "s.yaml"])
    with pytest.raises(LaunchError, match="serves tinytitan-demo, not tinytitan-scripted"):
        _pick([{"id": "tinytitan-demo"}], ns, "http://127.0.0.1:9")
    assert _pick([{"id": "tinytitan-scripted"}], ns, "http://127.0.0.1:9")["id"] == "tinytitan-scripted"
    _, named, _, _ = parse(["claude", "--script", "s.yaml", "--model-id", "mine"])
    assert _pick([{"id": "mine"}], named, "http://127.0.0.1:9")["id"] == "mine"
    with pytest.raises(LaunchError, match="not mine"):  # the id asked for, not the scripted default
        _pick([{"id": "tinytitan-scripted"}], named, "http://127.0.0.1:9")


def test_an_agent_not_installed_is_named_with_its_install_command(tmp_path):
    env = {**env_for(tmp_path), "PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "tinytitan", "launch", "qwen-code"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "qwen-code (`qwen`) is not installed: npm install -g @qwen-code/qwen-code" in done.stderr


@needs_claude
def test_a_first_prompt_that_cannot_fit_is_said_before_the_agent_starts(tmp_path):
    """launch starts its own server here (8k window), finds Claude Code's first prompt too large, says what to
    do, and stops the server; with --fast it would run on the -fast name; pi's prompt fits as it is."""
    script = tmp_path / "s.yaml"
    script.write_text(f'- "{ANSWER}"\n')
    args = ["--script", str(script), "--context-window", "8192", "--port", "0"]
    done = launch(["claude", *args], tmp_path, tmp_path, timeout=START_TIMEOUT)
    assert done.returncode == 2, done.stderr
    port = launched_port(done.stderr)
    assert f"Claude Code's first prompt is about {agents.FIRST_PROMPT_TOKENS['claude-code']:,} tokens" in done.stderr
    assert "'tinytitan-scripted' has a 8,192-token window" in done.stderr
    # the larger window it offers is the first (in 4k steps) where the prompt fits under Claude Code's compaction
    offered = int(re.search(r"--context-window (\d+)", done.stderr).group(1))
    info = {"id": "tinytitan-scripted", "context_window": offered}
    assert "--fast" in done.stderr and agents.first_prompt_fits("claude-code", info)
    assert not agents.first_prompt_fits("claude-code", {**info, "context_window": offered - 4096})
    with pytest.raises(httpx.HTTPError):  # the server it started is gone
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
    fast = launch(["claude", *args, "--fast", "--print"], tmp_path, tmp_path, timeout=START_TIMEOUT)
    assert fast.returncode == 0, fast.stderr
    assert "claude --model tinytitan-scripted-fast" in fast.stdout
    assert "# the server (launch starts it when nothing answers on the port):" in fast.stdout
    assert "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=" in fast.stdout  # the 8k window's arithmetic


@pytest.mark.clients
@needs(shutil.which("pi") is None, "pi is not installed: npm install -g @mariozechner/pi-coding-agent@0.73.1")
def test_launch_starts_a_server_for_the_agent_and_stops_it_after(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(f'- "{ANSWER}"\n')
    done = launch(["pi", "--script", str(script), "--port", "0", "--", "-p", "say hi"], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    port = launched_port(done.stderr)
    assert ANSWER in done.stdout
    assert "Running on http://127.0.0.1" in done.stderr  # the server's log, relayed while it started
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)


def test_misfit_names_both_ways_out():
    assert misfit("pi", 8192, "m", scripted=False) is None
    text = misfit("qwen-code", 16384, "m", scripted=False)
    assert "'m-fast'" in text and "--force" in text and "larger window" in text
    assert "--context-window 32768" in misfit("qwen-code", 16384, "m", scripted=True)  # (29,500 + room)


def test_every_agent_is_set_up_from_the_model_card_alone(tmp_path):
    """The files an agent is given live under launch's own directory, and each carries the model's window."""
    card = {"id": "m", "context_window": 32768, "max_output_tokens": 32768,
            "capabilities": {"tools": True, "reasoning": True}}
    catalog = [{"slug": "m", "context_window": 32768}]
    for agent in AGENTS:
        inv = invocation(agent, Served("http://127.0.0.1:9", "m", "k", card, catalog), tmp_path / agent, ["X"])
        assert inv.argv[-1] == "X" and inv.argv[0] == PROGRAMS[agent]
        for path in inv.files:
            assert tmp_path / agent in path.parents
        said = " ".join(inv.argv) + " ".join(f"{k}={v}" for k, v in inv.env.items()) + " ".join(inv.files.values())
        window = "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=24.59" if agent == "claude" else "32768"  # agents.claude_env
        assert window in said, agent
        assert "http://127.0.0.1:9" in said, agent


def test_serve_flags_a_running_server_cannot_take_are_named_not_dropped(server, tmp_path):
    """A serve flag given to launch reaches only a server launch starts: one already running on the port keeps
    its own settings, and launch says which flags were not applied instead of dropping them silently."""
    done = launch(["pi", "--port", str(server.port), "--memory", "--max-batch", "1", "--kv-bits=8", "--print"],
                  tmp_path, tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"using the server already running at {server.base}" in done.stderr
    assert "--memory, --max-batch, --kv-bits: not applied" in done.stderr
    plain = launch(["pi", "--port", str(server.port), "--print"], tmp_path, tmp_path, timeout=60)
    assert "not applied" not in plain.stderr
