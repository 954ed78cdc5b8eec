"""What each coding agent is given to talk to the served model: a pure function of the model's card.

Rules (one row per agent; versions they were checked with in brackets):
- claude (Claude Code 2.1.337): Anthropic Messages. ``ANTHROPIC_BASE_URL``, the key as ``ANTHROPIC_AUTH_TOKEN``
  (a bearer token: no "use this API key?" question, no account key sent), the window and output cap as
  ``tinytitan.agents.claude_env`` computes them, its Haiku model (subagents, titles) on the model itself;
  telemetry, error reporting and the auto-updater off (``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` …).
  ``--model <id>``.
- codex (Codex CLI 0.171): OpenAI Responses over plain HTTP, a custom provider given entirely as ``-c``
  overrides, and a model catalog of launch's own (``model_catalog_json``: the server's catalog entries, which
  carry the window, auto-compaction and ``apply_patch``); analytics and the update check off.
- opencode (1.18): Chat Completions through ``@ai-sdk/openai-compatible``, its whole configuration in
  ``OPENCODE_CONFIG_CONTENT`` (merged over the user's), the window and output cap as the model's ``limit``,
  the small model (titles, summaries) the model itself, image input (``attachment``, ``modalities``) for a model
  that takes images; autoupdate, sharing, the models.dev fetch and LSP downloads off.
- pi (0.73): Chat Completions; ``PI_CODING_AGENT_DIR`` points it at an agent directory of launch's own whose
  ``models.json`` holds the provider, the model's ``contextWindow`` / ``maxTokens`` and its ``input`` (``image``
  for a model that takes images, or pi omits every picture); offline, no telemetry, no version check.
- aider (0.86): Chat Completions through litellm (``--openai-api-base``, ``--model openai/<id>``), the window and
  output cap in a ``--model-metadata-file`` of launch's own (``supports_vision`` for a model that takes images,
  or an image added to the chat is never sent), the weak model the model itself; analytics
  (``--no-analytics``: this run only, never the permanent ``--analytics-disable``, which writes the user's
  config) and update checks off.
- qwen-code (0.15): Chat Completions (``--auth-type openai``, ``OPENAI_BASE_URL`` …); a system settings file of
  launch's own (``QWEN_CODE_SYSTEM_SETTINGS_PATH``: it overrides the user's settings for this run only) holds
  the window (``contextWindowSize``), image input (``modalities``: for a model id it does not know, qwen-code
  assumes text only and answers a Read of a picture itself), usage statistics, telemetry and auto-update off; the
  output cap is
  ``QWEN_CODE_MAX_OUTPUT_TOKENS``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..agents import claude_env

AGENTS = ("claude", "codex", "opencode", "pi", "aider", "qwen-code")
PROGRAMS = {"claude": "claude", "codex": "codex", "opencode": "opencode", "pi": "pi", "aider": "aider",
            "qwen-code": "qwen"}
INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
    "opencode": "npm install -g opencode-ai",
    "pi": "npm install -g @mariozechner/pi-coding-agent",
    "aider": "pipx install aider-chat  (or: python -m pip install aider-install && aider-install)",
    "qwen-code": "npm install -g @qwen-code/qwen-code",
}
NAMES = {"claude": "Claude Code", "codex": "Codex CLI", "opencode": "opencode", "pi": "pi", "aider": "Aider",
         "qwen-code": "qwen-code"}
PROVIDER = "tinytitan"


@dataclass(frozen=True)
class Served:
    """The model an agent is pointed at: where, by which name, with which key, and its card (``/v1/models``)."""
    base: str  # http://127.0.0.1:8096, no trailing slash
    model: str  # the name the agent sends (the served id, or ``<id>-fast``)
    key: str
    card: dict  # the served model's /v1/models entry: context_window, max_output_tokens, capabilities
    codex_catalog: list = field(default_factory=list)  # the server's Codex catalog entries

    @property
    def base_model(self) -> str:
        """The served id itself, never the chat-only '-fast' name: for an agent's small model (titles, commit
        messages, subagents), whose requests carry their instructions in a system message the '-fast' name strips."""
        return str(self.card["id"])

    @property
    def window(self) -> int:
        return int(self.card["context_window"])

    @property
    def output_cap(self) -> int:
        """What an agent may ask for per turn: a quarter of the window, at most 32,000 and at most the model's."""
        cap = max(256, min(32_000, self.window // 4))
        most = self.card.get("max_output_tokens")
        return min(cap, int(most)) if most else cap


@dataclass
class Invocation:
    """What runs: argv, the variables added to the environment, and files of launch's own written first."""
    argv: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)


# Claude Code's switches to a cloud provider other than the base URL (Bedrock, Vertex …): each one set in the
# user's shell or settings would take it there, past ANTHROPIC_BASE_URL; empty is off
CLAUDE_PROVIDER_SWITCHES = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY",
                            "CLAUDE_CODE_USE_ANTHROPIC_AWS", "CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD",
                            "CLAUDE_CODE_USE_MANTLE")


CLAUDE_WINDOW_VARIABLE = "CLAUDE_CODE_MAX_CONTEXT_TOKENS"


def claude(s: Served, own: Path, args: list[str]) -> Invocation:
    env = {"ANTHROPIC_BASE_URL": s.base, "ANTHROPIC_AUTH_TOKEN": s.key, "ANTHROPIC_API_KEY": "",
           **claude_env({**s.card, "context_window": s.window}),
           # its Haiku slot runs the Explore and Guide subagents (tools, and their own system prompt) and titles
           # (from a system message's instructions): the model itself, never the chat-only '-fast' name
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": s.base_model,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
           **{name: "" for name in CLAUDE_PROVIDER_SWITCHES},
           # an unknown model's window in 2.1.337, which a user's shell or settings may set for another server:
           # under 100,000 it would compact before the first prompt (agents.py); 0 is what the bundle reads as unset
           CLAUDE_WINDOW_VARIABLE: "0"}
    # the same again as --settings (less the key, which stays off the command line): the "env" of the user's
    # ~/.claude/settings.json (or a project's) is applied over the process environment, and would send the
    # session to the URL and limits it names; flag settings come after every settings file but a managed one
    flag = {k: v for k, v in env.items() if k != "ANTHROPIC_AUTH_TOKEN"}
    return Invocation(["claude", "--model", s.model, "--settings", json.dumps({"env": flag}), *args], env)


def codex(s: Served, own: Path, args: list[str]) -> Invocation:
    catalog = own / "model_catalog.json"
    entries = [dict(e) for e in s.codex_catalog]  # the server's, -fast entries included (agents.codex_entries)
    p = f"model_providers.{PROVIDER}"
    overrides = {"model": s.model, "model_provider": PROVIDER, "model_catalog_json": str(catalog),
                 f"{p}.name": PROVIDER, f"{p}.base_url": s.base + "/v1", f"{p}.env_key": "TINYTITAN_API_KEY",
                 f"{p}.wire_api": "responses", "analytics.enabled": False, "check_for_update_on_startup": False}
    argv = ["codex"]
    for k, v in overrides.items():
        argv += ["-c", f"{k}={json.dumps(v)}"]
    return Invocation(argv + args, {"TINYTITAN_API_KEY": s.key},
                      {catalog: json.dumps({"models": entries}, indent=1)})


OPENCODE_AGENTS = ("build", "plan", "general", "explore", "compaction")  # opencode 1.18's built-in agents
OPENCODE_SMALL_AGENTS = ("title", "summary")  # those that run on its small model


def opencode(s: Served, own: Path, args: list[str]) -> Invocation:
    model = {"name": s.base_model, "limit": {"context": s.window, "output": s.output_cap},
             "tool_call": bool((s.card.get("capabilities") or {}).get("tools", True))}
    if takes_images(s):  # else opencode replaces an attached picture by an error
        model.update(attachment=True, modalities={"input": ["text", "image"], "output": ["text"]})
    config = {"$schema": "https://opencode.ai/config.json",
              "provider": {PROVIDER: {"npm": "@ai-sdk/openai-compatible", "name": "tinytitan",
                                      "options": {"baseURL": s.base + "/v1", "apiKey": s.key},
                                      "models": {s.base_model: model}}},
              # (its small model writes titles and summaries from a system message: not the '-fast' name, which
              # strips it; that name stays in the list, to pick by hand)
              "model": f"{PROVIDER}/{s.model}", "small_model": f"{PROVIDER}/{s.base_model}",
              # an agent's own "model" in the user's opencode.json comes before the top-level one: each built-in
              # agent is named here, or the user's `agent.build.model` would take the session to another provider
              "agent": {name: {"model": f"{PROVIDER}/{s.model}"} for name in OPENCODE_AGENTS}
              | {name: {"model": f"{PROVIDER}/{s.base_model}"} for name in OPENCODE_SMALL_AGENTS},
              "autoupdate": False, "share": "disabled"}
    fast = _fast(s.base_model)
    config["provider"][PROVIDER]["models"][fast] = {**model, "name": fast, "tool_call": False}
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "OPENCODE_DISABLE_AUTOUPDATE": "1",
           "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
           "OPENCODE_DISABLE_SHARE": "1"}
    return Invocation(["opencode", *args], env)


def pi(s: Served, own: Path, args: list[str]) -> Invocation:
    agent_dir = own / "agent"
    reasoning = bool((s.card.get("capabilities") or {}).get("reasoning"))
    models = {"providers": {PROVIDER: {
        "baseUrl": s.base + "/v1", "api": "openai-completions", "apiKey": "TINYTITAN_API_KEY",
        "models": [{"id": s.model, "name": s.model, "reasoning": reasoning,
                    "input": ["text", "image"] if takes_images(s) else ["text"],
                    "contextWindow": s.window, "maxTokens": s.output_cap,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]}}}
    env = {"PI_CODING_AGENT_DIR": str(agent_dir), "TINYTITAN_API_KEY": s.key, "PI_OFFLINE": "1",
           "PI_TELEMETRY": "0", "PI_SKIP_VERSION_CHECK": "1"}
    return Invocation(["pi", "--model", f"{PROVIDER}/{s.model}", *args], env,
                      {agent_dir / "models.json": json.dumps(models, indent=1)})


def aider(s: Served, own: Path, args: list[str]) -> Invocation:
    metadata = own / "model_metadata.json"
    entry = {"max_input_tokens": s.window, "max_output_tokens": s.output_cap, "max_tokens": s.output_cap,
             "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "litellm_provider": "openai",
             "mode": "chat", **({"supports_vision": True} if takes_images(s) else {})}
    # (its weak model writes commit messages and history summaries from a system message's instructions: the
    # model itself, never the chat-only '-fast' name, which strips every system message)
    argv = ["aider", "--openai-api-base", s.base + "/v1", "--model", f"openai/{s.model}",
            "--weak-model", f"openai/{s.base_model}", "--model-metadata-file", str(metadata),
            "--no-analytics", "--no-check-update", "--no-show-model-warnings", "--no-show-release-notes"]
    # the key also as AIDER_OPENAI_API_KEY (--openai-api-key): aider loads a .env file (the project's, the home
    # directory's) over the environment, and an OPENAI_API_KEY there would be sent instead (401 with --api-key)
    env = {"OPENAI_API_KEY": s.key, "AIDER_OPENAI_API_KEY": s.key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    entries = {f"openai/{m}": entry for m in dict.fromkeys((s.model, s.base_model))}
    return Invocation(argv + args, env, {metadata: json.dumps(entries, indent=1)})


def qwen_code(s: Served, own: Path, args: list[str]) -> Invocation:
    settings_path = own / "settings.json"
    settings = {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                "general": {"enableAutoUpdate": False},
                "security": {"auth": {"selectedType": "openai"}},
                "model": {"name": s.model, "generationConfig": {"contextWindowSize": s.window,
                                                                **({"modalities": {"image": True}}
                                                                   if takes_images(s) else {})}}}
    env = {"QWEN_CODE_SYSTEM_SETTINGS_PATH": str(settings_path), "OPENAI_BASE_URL": s.base + "/v1",
           "OPENAI_API_KEY": s.key, "OPENAI_MODEL": s.model, "QWEN_CODE_MAX_OUTPUT_TOKENS": str(s.output_cap)}
    return Invocation(["qwen", "--auth-type", "openai", "--model", s.model, *args], env,
                      {settings_path: json.dumps(settings, indent=1)})


PLANS = {"claude": claude, "codex": codex, "opencode": opencode, "pi": pi, "aider": aider, "qwen-code": qwen_code}


def invocation(agent: str, served: Served, own: Path, args: list[str]) -> Invocation:
    """How ``agent`` runs against ``served``, its own files under ``own``, the user's ``args`` last."""
    return PLANS[agent](served, own, list(args))


def takes_images(s: Served) -> bool:
    """Whether the served model reads pictures (its card's ``input_modalities``): each agent must be told, or it
    drops them before they are sent."""
    return "image" in (s.card.get("input_modalities") or ())


def _fast(model: str) -> str:
    return model if model.endswith("-fast") else model + "-fast"
