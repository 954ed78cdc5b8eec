"""What ``tinytitan serve`` prints at start: the base URL, the model, and settings ready to paste for each agent
(Claude Code's environment, Codex's providers with the model catalog written at start)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("tinytitan")


def banner(base: str, model_id: str, api_key: str | None, info: dict | None = None,
           catalog: Path | None = None) -> str:
    """What to paste into each agent: ``info`` (the served model's ``models()`` entry) gives Claude Code its
    window; ``catalog`` is the Codex model catalog written for this start (tinytitan/agents.py)."""
    from .agents import FIRST_PROMPT_TOKENS, claude_env, first_prompt_fits

    key = api_key or "local"
    claude = " ".join(f"{k}={v}" for k, v in claude_env(info).items()) + " " if info else ""
    catalog_line = f'  model_catalog_json = "{catalog}"\n' if catalog else ""

    def fit(agent: str) -> tuple[str, str]:
        """A note where the agent's first prompt cannot fit the model, and the model id to give it (then
        ``<id>-fast``, the chat-only path)."""
        if info is None or first_prompt_fits(agent, info):
            return "", model_id
        return (f"  (its first prompt, ~{FIRST_PROMPT_TOKENS[agent]:,} tokens, cannot fit this model's "
                f"{int(info['context_window']):,}-token window: use the chat-only {model_id}-fast, no tools)\n",
                f"{model_id}-fast")

    claude_note, claude_model = fit("claude-code")
    codex_note, codex_model = fit("codex")
    return f"""
tinytitan is serving '{model_id}' at {base}
  OpenAI:     base_url={base}/v1   (Chat Completions, Responses, legacy Completions)
  Anthropic:  base_url={base}      (Messages)
  Ollama:     OLLAMA_HOST={base}   (/api/chat, /api/generate; model '{model_id}:latest')
  Dashboard:  {base}/ in a browser (Prometheus metrics: {base}/metrics; turn timings: {base}/profile)
  Agents:     tinytitan launch AGENT --port {base.rsplit(":", 1)[-1]}   (claude, codex, opencode, pi, aider, qwen-code: \
each set up for this model, nothing to paste)

Claude Code (the window and output cap it compacts within; no traffic but to this server and, interactive, \
its plugin marketplace):
{claude_note}  ANTHROPIC_BASE_URL={base} ANTHROPIC_API_KEY={key} {claude}claude --model {claude_model}

Codex (~/.codex/config.toml), a custom provider (plain HTTP):
{codex_note}  model = "{codex_model}"
  model_provider = "tinytitan"
{catalog_line}  [model_providers.tinytitan]
  name = "tinytitan"
  base_url = "{base}/v1"
  env_key = "TINYTITAN_API_KEY"
  wire_api = "responses"
  (then: TINYTITAN_API_KEY={key} codex)
Codex, its built-in provider (a WebSocket; it ignores the OPENAI_BASE_URL variable):
  model = "{codex_model}"
  openai_base_url = "{base}/v1"
{catalog_line}  (then: OPENAI_API_KEY={key} codex)
"""


def codex_catalog(engine) -> Path | None:
    """Codex's model catalog for the served models, rewritten at each start under the cache directory."""
    from .agents import codex_catalog_path, write_codex_catalog
    from .models.cache_dir import cache_root

    try:
        return write_codex_catalog(engine.models(), codex_catalog_path(cache_root()))
    except OSError as exc:  # a read-only cache: the banner leaves the line out
        log.warning("could not write the Codex model catalog: %s", exc)
        return None
