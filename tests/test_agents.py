"""What the agents are told about the served model (tinytitan/agents.py): Codex's model catalog from the
model's own numbers, and the Claude Code environment whose compaction point leaves the prompt and the output
cap inside the real window — checked with Claude Code's own arithmetic for windows above and below its floor."""

from __future__ import annotations

import json

import pytest

from tinytitan.agents import (CLAUDE_WINDOW_FLOOR, FIRST_PROMPT_TOKENS, claude_compacts_at, claude_env,
                              codex_entries, codex_entry, first_prompt_fits, write_codex_catalog)
from tinytitan.banner import banner
from tinytitan.engine.engine import Engine
from tinytitan.engine.backends.scripted import ScriptEntry, ScriptedBackend

CODEX_REQUIRED = {"slug", "display_name", "base_instructions", "apply_patch_tool_type", "shell_type", "visibility",
                  "supported_in_api", "priority", "supported_reasoning_levels", "truncation_policy",
                  "context_window", "support_verbosity", "experimental_supported_tools"}


def info(window: int, reasoning=True, levels=("off", "on")) -> dict:
    return {"id": "m", "context_window": window, "max_output_tokens": window,
            "features": {"tools": True, "reasoning": reasoning, "reasoning_levels": list(levels)}}


@pytest.mark.parametrize("window", [2048, 8192, 16384, 32768, 65536, 99_999, 100_000, 131072, 262144])
def test_claude_code_compacts_inside_the_real_window(window):
    env = claude_env(info(window))
    output = int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"])
    at = claude_compacts_at(env)
    assert 0 < at and at + output <= window, (env, at)
    assert at >= window * 0.4, (env, at)  # and not needlessly early
    assert int(env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"]) >= CLAUDE_WINDOW_FLOOR
    assert ("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE" in env) == (window < CLAUDE_WINDOW_FLOOR)


@pytest.mark.parametrize("window", [32768, 65536, 131072])
def test_claude_codes_own_window_variable_is_left_unset(window):
    """Claude Code 2.1.337 takes CLAUDE_CODE_MAX_CONTEXT_TOKENS as an unknown model's window, and the compaction
    window never exceeds it: under the 100,000 floor that undoes the percentage placed on 100,000 (it then compacts
    at a share of a window already small: for 32k, before its first prompt), above it it changes nothing. So the
    environment leaves it unset, and the switch that stops the unknown-model window's enforcement too."""
    env = claude_env(info(window))
    assert not {"CLAUDE_CODE_MAX_CONTEXT_TOKENS", "CLAUDE_CODE_DISABLE_UNKNOWN_MODEL_WINDOW_ENFORCEMENT"} & set(env)
    assert claude_compacts_at({**env, "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "0"}) == claude_compacts_at(env)  # (0: unset)
    told = claude_compacts_at({**env, "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(window)})
    if window < CLAUDE_WINDOW_FLOOR:
        # nor would the bundle's own point serve without the percentage: 13,000 under the window less the reserve
        plain = claude_compacts_at({"CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(window),
                                    "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(CLAUDE_WINDOW_FLOOR),
                                    "CLAUDE_CODE_MAX_OUTPUT_TOKENS": env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]})
        assert max(told, plain) < claude_compacts_at(env), (env, told, plain)
        if window == 32768:  # 6,043 and 11,576: both under the ~20.8k first prompt
            assert max(told, plain) < FIRST_PROMPT_TOKENS["claude-code"], (told, plain)
    else:
        assert told == claude_compacts_at(env)


def test_the_codex_entry_is_the_models_own(tmp_path):
    e = codex_entry(info(16384))
    assert CODEX_REQUIRED <= set(e)
    assert e["context_window"] == 16384 and e["auto_compact_token_limit"] < 16384 * 0.9
    assert e["apply_patch_tool_type"] == "freeform" and e["default_reasoning_level"] == "medium"
    assert e["input_modalities"] == ["text"]  # a text model: Codex refuses view_image itself
    assert codex_entry({**info(16384), "input_modalities": ["text", "image"]})["input_modalities"] == ["text", "image"]
    assert [lvl["effort"] for lvl in e["supported_reasoning_levels"]] == ["none", "medium"]
    ladder = codex_entry(info(8192, levels=("low", "medium", "high")))
    assert [lvl["effort"] for lvl in ladder["supported_reasoning_levels"]] == ["low", "medium", "high"]
    plain = codex_entry(info(8192, reasoning=False, levels=()))
    assert plain["supported_reasoning_levels"] == [] and "default_reasoning_level" not in plain


def test_the_catalog_and_the_banner_say_the_same(tmp_path, demo_tok):
    engine = Engine(ScriptedBackend([ScriptEntry("x")], demo_tok, context_window=16384))
    path = write_codex_catalog(engine.models(), tmp_path / "codex" / "model_catalog.json")
    entry, fast = json.loads(path.read_text())["models"]
    assert entry["slug"] == "tinytitan-scripted" and entry["context_window"] == 16384
    assert fast["slug"] == "tinytitan-scripted-fast" and fast["context_window"] == 16384  # the banner's fallback
    text = banner("http://127.0.0.1:9", engine.model_id, None, engine.model_info(engine.model_id), path)
    assert text.count(f'model_catalog_json = "{path}"') == 2  # the custom provider and the built-in one
    assert 'openai_base_url = "http://127.0.0.1:9/v1"' in text
    env = claude_env(engine.model_info(engine.model_id))
    assert " ".join(f"{k}={v}" for k, v in env.items()) in text


async def test_claude_codes_gateway_discovery_request_is_answered_in_the_anthropic_shape(serve):
    """The request Claude Code's gateway model discovery makes (CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1):
    ``GET /v1/models?limit=1000`` with ``anthropic-version`` and the key; it reads ``data[].id`` and
    ``display_name`` (the window and output cap are there for clients that read them)."""
    import httpx

    import strict

    server = await serve(["x"], api_key="k")
    async with httpx.AsyncClient() as client:
        r = await client.get(server.url("/v1/models"), params={"limit": "1000"},
                             headers={"anthropic-version": "2023-06-01", "x-api-key": "k"})
    assert r.status_code == 200
    strict.anthropic_model_list(r.json())
    (model,) = r.json()["data"]
    assert model["id"] == "tinytitan-scripted" and model["display_name"]
    assert model["max_input_tokens"] == 131072 and model["max_tokens"] == 131072


async def test_codexs_models_endpoint_gets_the_catalog(serve):
    """Codex's own models fetch (codex-api ModelsClient: ``GET {base}/models?client_version=…``, read as
    ``{"models": [ModelInfo]}``) gets the same entries the catalog file holds."""
    import httpx

    server = await serve(["x"], strict=False)  # (not an OpenAI model list: the strict check would refuse it)
    async with httpx.AsyncClient() as client:
        r = await client.get(server.url("/v1/models"), params={"client_version": "0.171.0"})
        plain = await client.get(server.url("/v1/models"))
    assert r.status_code == 200
    assert r.json() == {"models": codex_entries(server.engine.models())}
    assert plain.json()["object"] == "list"


def test_two_servers_keep_each_others_catalog_entries(tmp_path):
    path = tmp_path / "codex" / "model_catalog.json"
    write_codex_catalog([{**info(16384), "id": "alpha"}], path)
    write_codex_catalog([{**info(8192), "id": "beta"}], path)  # another server, another model
    write_codex_catalog([{**info(32768), "id": "alpha"}], path)  # the first again, restarted with a new window
    entries = {e["slug"]: e for e in json.loads(path.read_text())["models"]}
    assert set(entries) == {"alpha", "beta", "alpha-fast", "beta-fast"}
    assert entries["alpha"]["context_window"] == 32768 and entries["beta"]["context_window"] == 8192
    path.write_text("not json")  # a broken file is replaced, not fatal
    write_codex_catalog([{**info(8192), "id": "beta"}], path)
    assert [e["slug"] for e in json.loads(path.read_text())["models"]] == ["beta", "beta-fast"]


@pytest.mark.parametrize("window", [4096, 8192, 16384, 24576, 32768, 65536, 131072])
def test_the_first_prompt_check_follows_each_agents_compaction_point(window):
    m = info(window)
    claude = first_prompt_fits("claude-code", m)
    assert claude == (FIRST_PROMPT_TOKENS["claude-code"] < claude_compacts_at(claude_env(m)))
    assert first_prompt_fits("codex", m) == (FIRST_PROMPT_TOKENS["codex"] < window * 0.8)
    assert claude is (window >= 32768)  # 2.1.332's ~20.8k first prompt: 32k is the smallest window that holds it


@pytest.mark.parametrize("window, claude_fits, codex_fits", [(4096, False, False), (8192, False, True),
                                                               (65536, True, True)])
def test_the_banner_points_an_agent_that_cannot_fit_at_the_fast_model(window, claude_fits, codex_fits):
    text = banner("http://127.0.0.1:9", "m", None, info(window), None)
    claude_line = next(line for line in text.splitlines() if "claude --model" in line)
    assert "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1" in claude_line
    assert claude_line.endswith("claude --model m" if claude_fits else "claude --model m-fast")
    codex_models = [line.strip() for line in text.splitlines() if line.strip().startswith("model = ")]
    assert codex_models == ['model = "m"' if codex_fits else 'model = "m-fast"'] * 2
    notes = [line for line in text.splitlines() if "cannot fit" in line]
    assert len(notes) == (not claude_fits) + (not codex_fits)
    if not claude_fits:
        assert f"~{FIRST_PROMPT_TOKENS['claude-code']:,} tokens, cannot fit this model's {window:,}-token window" in text
