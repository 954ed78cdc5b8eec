"""``tinytitan launch`` against a user's own configuration: whatever the user's settings files, shell and .env
say, the agent talks to the served model (launch never writes those files, so it must outrank them)."""

from __future__ import annotations

import json
import shutil

from claude_harness import needs_claude
from conftest import needs
from launch_helpers import ANSWER, Server, TURN, launch
from tinytitan.agents import claude_compacts_at, claude_env
from tinytitan.launch.settings import Served, invocation

CARD = {"id": "m", "context_window": 32768, "max_output_tokens": 32768, "capabilities": {"tools": True}}


def scripted(tmp_path, *extra):
    (tmp_path / "s").mkdir()
    return Server(tmp_path / "s", *extra)


def plan(agent, tmp_path, model="m", key="k"):
    return invocation(agent, Served("http://127.0.0.1:9", model, key, CARD, []), tmp_path / agent, [])


def test_claude_gets_its_settings_as_a_flag_that_outranks_the_users_settings_files(tmp_path):
    inv = plan("claude", tmp_path, key="secret")
    flag = json.loads(inv.argv[inv.argv.index("--settings") + 1])["env"]
    assert flag["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9" and flag["CLAUDE_CODE_USE_BEDROCK"] == ""
    assert inv.env["CLAUDE_CODE_USE_VERTEX"] == "" and "secret" not in " ".join(inv.argv)


def test_claude_codes_window_variable_from_the_users_shell_or_settings_is_outranked(tmp_path):
    """A CLAUDE_CODE_MAX_CONTEXT_TOKENS the user keeps for another server (shell or settings.json) would take a
    small window's compaction point under Claude Code's first prompt (tests/test_agents.py): launch sets it to 0,
    which Claude Code 2.1.337 reads as unset, in the environment and in the flag that outranks settings files."""
    inv = plan("claude", tmp_path)
    flag = json.loads(inv.argv[inv.argv.index("--settings") + 1])["env"]
    assert inv.env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == flag["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "0"
    assert claude_compacts_at(inv.env) == claude_compacts_at(claude_env({**CARD, "context_window": 32768}))


def test_fast_keeps_each_agents_small_model_on_the_served_id(tmp_path):
    """docs/models/index.md: the -fast name "is not for an agent's small model"."""
    assert plan("claude", tmp_path, "m-fast").env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "m"
    aider = plan("aider", tmp_path, "m-fast")
    assert aider.argv[aider.argv.index("--weak-model") + 1] == "openai/m"
    assert set(json.loads(next(iter(aider.files.values())))) == {"openai/m-fast", "openai/m"}
    config = json.loads(plan("opencode", tmp_path, "m-fast").env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == "tinytitan/m-fast" and config["small_model"] == "tinytitan/m"
    assert set(config["provider"]["tinytitan"]["models"]) == {"m", "m-fast"}
    assert config["agent"]["build"]["model"] == "tinytitan/m-fast" and config["agent"]["title"]["model"] == "tinytitan/m"


@needs_claude
def test_claude_reaches_the_server_past_the_users_settings_env_and_a_cloud_switch(tmp_path):
    server = scripted(tmp_path)
    try:
        home, work = tmp_path / "home", tmp_path / "work"
        (home / ".claude").mkdir(parents=True)
        work.mkdir()
        (home / ".claude" / "settings.json").write_text(json.dumps(
            {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "CLAUDE_CODE_USE_BEDROCK": "1"}}))
        done = launch(["claude", "--port", str(server.port), "--", *TURN["claude"]], home, work, timeout=120)
        assert done.returncode == 0 and ANSWER in done.stdout, done.stdout + done.stderr
        assert server.prompts_since(0)
    finally:
        server.stop()


@needs(shutil.which("opencode") is None, "opencode is not installed")
def test_opencode_reaches_the_server_past_an_agent_model_in_the_users_config(tmp_path):
    server = scripted(tmp_path)
    try:
        home, work = tmp_path / "home", tmp_path / "work"
        (home / ".config" / "opencode").mkdir(parents=True)
        work.mkdir()
        (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps({
            "provider": {"corp": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": "http://127.0.0.1:9/v1"},
                                  "models": {"big": {"name": "big"}}}},
            "model": "corp/big", "agent": {"build": {"model": "corp/big"}}}))
        done = launch(["opencode", "--port", str(server.port), "--", *TURN["opencode"]], home, work, timeout=120)
        assert done.returncode == 0 and ANSWER in done.stdout, done.stdout + done.stderr
    finally:
        server.stop()


@needs(shutil.which("aider") is None, "aider is not installed")
def test_aider_sends_launchs_key_past_an_openai_key_in_a_dotenv(tmp_path):
    server = scripted(tmp_path, "--api-key", "secret")
    try:
        home, work = tmp_path / "home", tmp_path / "work"
        home.mkdir()
        work.mkdir()
        (work / "main.py").write_text("x = 1\n")
        (work / ".env").write_text("OPENAI_API_KEY=sk-the-users-own\n")
        done = launch(["aider", "--port", str(server.port), "--api-key", "secret", "--", *TURN["aider"]], home, work,
                      timeout=120)
        assert ANSWER in done.stdout, done.stdout + done.stderr
        assert " 401 " not in server.log.read_text()
    finally:
        server.stop()


def test_print_names_the_port_once(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(f'- "{ANSWER}"\n')
    done = launch(["pi", "--script", str(script), "--port", "0", "--print"], tmp_path, tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("--port") == 1, done.stdout
