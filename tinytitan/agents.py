"""What the coding agents must be told about the served models, since neither learns it from the server.

Rules:
- Codex (0.171) reads a model's metadata only from a ``model_catalog_json`` file, never from the provider:
  context window, auto-compaction limit, reasoning levels, ``apply_patch_tool_type`` (freeform: its Lark-grammar
  ``apply_patch`` tool), ``input_modalities`` (``["text"]``: Codex refuses ``view_image`` itself) and the base
  instructions (a short coding-agent prompt instead of the fallback's long one). ``write_codex_catalog`` writes
  one entry per served model, from each model's own config, at every start, into the one catalog file every
  server on the machine shares: entries of models it does not serve are kept (another server's), its own replaced.
- Claude Code (2.1.337, as 2.1.332) assumes a 1,000,000-token window for a model it does not know (200k before
  2.1.2xx) and reads no limits from ``/v1/models`` (its capability fetch is off; its gateway discovery keeps only
  ids holding ``claude`` / ``anthropic``, and of those only id, name and description). Its environment sets the
  window: ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (at least 100,000, the bundle's floor), ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``,
  and, for a window under that floor, ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``: compaction at that percentage of the
  effective window (the window less the output reserve, at most 20,000), placed so the prompt plus the output cap
  fits the real window. Not set: 2.1.337's ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` (an unknown model's window: under
  the floor it takes the compaction window down with it, whose point stays 13,000 under the effective window, so
  below a 32k window's first prompt; launch sets it to 0, read as unset, over one the user keeps for another
  server) and ``CLAUDE_CODE_DISABLE_UNKNOWN_MODEL_WINDOW_ENFORCEMENT`` (read only
  where ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` is not set; it then stops compaction until the server refuses).
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` keeps 2.1.337 on the server, but for an interactive session's
  install of the official plugin marketplace (downloads.claude.ai, github.com), which only a switch that Claude
  Code records as a refusal for good in the user's ``~/.claude.json`` stops: left on. docs/agents/claude-code.md
  lists the hosts.
- An agent whose first prompt (``FIRST_PROMPT_TOKENS``) cannot fit under the compaction point it is given would
  compact before its first answer, or be refused: ``first_prompt_fits`` says so, and the banner then prints the
  ``<id>-fast`` line (the chat-only path, scaffolding stripped) instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CODEX_INSTRUCTIONS = """You are a coding agent working in the user's terminal and repository, on a model served locally.
Read before you change: inspect files with the shell, keep changes small and focused, and apply edits with the
apply_patch tool. Run the project's tests or commands when they show whether a change works. When the task is
done, say briefly what you changed and how you checked it; if you could not finish, say what is left."""

CLAUDE_WINDOW_FLOOR = 100_000  # the least CLAUDE_CODE_AUTO_COMPACT_WINDOW Claude Code takes (2.1.197 to 2.1.337)
CLAUDE_ASSUMED_WINDOW = 1_000_000  # the window it assumes for a model it does not know (2.1.332, 2.1.337)
# Each agent's first prompt, in tokens of the demo model's tokenizer (a Qwen-style BPE; other tokenizers land
# within ~15 %), measured against `tinytitan serve --script` (README, "Claude Code" and "Codex CLI"): Claude Code
# 2.1.332 interactive (tool search on; `-p` is 18.5k, 30.0k with ENABLE_TOOL_SEARCH=false; 2.1.337 sends 10 more
# in each), Codex 0.171 with
# the server's catalog entry (5,049 with supports_search_tool, which defers some of its own tools; 8.2k without;
# 5,127 through `tinytitan launch codex`, whose working directory and date differ): rounded up, as a bound.
FIRST_PROMPT_TOKENS = {"claude-code": 20_800, "codex": 5_400}
FIRST_ANSWER_ROOM = 1_024  # what a first answer needs beside the prompt, at least
CLAUDE_OUTPUT_RESERVE_CAP = 20_000  # the most of the output cap it keeps out of the window
CLAUDE_MARGIN = 2_000  # room for what its estimate of the prompt misses (a sixteenth of a small window)


def _codex_levels(info: dict) -> tuple[list[dict], str | None]:
    features = info.get("features") or {}
    if not features.get("reasoning"):
        return [], None
    ladder = [lvl for lvl in features.get("reasoning_levels") or [] if lvl in ("low", "medium", "high")]
    if ladder:
        return [{"effort": lvl, "description": f"reasoning effort {lvl}"} for lvl in ladder], \
            ("medium" if "medium" in ladder else ladder[0])
    return [{"effort": "none", "description": "thinking off"},
            {"effort": "medium", "description": "thinking on"}], "medium"


def codex_entry(info: dict) -> dict:
    """One model's entry in Codex's model catalog (codex-rs ``ModelInfo``), from the model's own numbers."""
    window = int(info["context_window"])
    levels, default = _codex_levels(info)
    entry = {
        "slug": info["id"], "display_name": info["id"], "description": "served by tinytitan",
        "base_instructions": CODEX_INSTRUCTIONS, "apply_patch_tool_type": "freeform", "shell_type": "shell_command",
        "visibility": "list", "supported_in_api": True, "priority": 1, "supported_reasoning_levels": levels,
        "truncation_policy": {"mode": "tokens", "limit": max(1000, min(10_000, window // 8))},
        "context_window": window, "auto_compact_token_limit": window * 8 // 10,
        # verbosity becomes an instruction, and a reasoning summary is the thought text (protocols/common.py,
        # spec/openai_responses.yaml): Codex may ask for both
        "support_verbosity": True, "supports_parallel_tool_calls": False, "supports_reasoning_summaries": True,
        "supports_search_tool": True,  # Codex then offers a client-executed tool_search and defers MCP tools
        "experimental_supported_tools": [],
        # what the model reads: with ["text"] Codex refuses its view_image tool itself instead of sending an image
        "input_modalities": list(info.get("input_modalities") or ["text"]),
    }
    if default is not None:
        entry["default_reasoning_level"] = default
    return entry


def codex_catalog_path(cache: Path) -> Path:
    return cache / "codex" / "model_catalog.json"


def codex_entries(models: list[dict]) -> list[dict]:
    """The catalog entries of ``models`` (the engine's ``models()``), each beside its ``<id>-fast`` entry (the
    chat-only path the banner and ``launch`` give Codex where its first prompt cannot fit: the same window):
    what the catalog file holds and what Codex's own models fetch is answered."""
    return [codex_entry(m) for m in models] + [
        {**codex_entry({**m, "id": f"{m['id']}-fast"}), "description": "served by tinytitan, chat only (no tools, "
         "no scaffolding)", "supports_search_tool": False} for m in models]


def write_codex_catalog(models: list[dict], path: Path) -> Path:
    """The catalog of ``models`` (the engine's ``models()``) merged into the one at ``path``: its entries for
    these slugs replaced, every other entry (another server's models) kept. Under an exclusive lock, so two
    servers starting at once do not lose each other's entries; written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ours = codex_entries(models)
    slugs = {e["slug"] for e in ours}
    with open(path.with_suffix(".lock"), "a") as lock:
        _lock(lock)
        try:
            kept = json.loads(path.read_text()).get("models", [])
            kept = [e for e in kept if isinstance(e, dict) and e.get("slug") not in slugs]
        except (OSError, ValueError, AttributeError):  # none yet, or not a catalog: written anew
            kept = []
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"models": kept + ours}, indent=1))
        os.replace(tmp, path)
    return path


def _lock(f) -> None:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the atomic replace alone
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def first_prompt_fits(agent: str, info: dict) -> bool:
    """Whether ``agent``'s first prompt (``FIRST_PROMPT_TOKENS``: ``"claude-code"`` or ``"codex"``) fits the model
    ``info`` describes (a ``models()`` entry), under the compaction point that agent is given for it (the banner's
    environment for Claude Code, the catalog's ``auto_compact_token_limit`` for Codex) and with room for a first
    answer in the window. Where it does not, the agent would compact before it ever answers (or be refused):
    point it at ``<id>-fast`` instead."""
    window = int(info["context_window"])
    tokens = FIRST_PROMPT_TOKENS[agent]
    if agent == "claude-code":
        limit = claude_compacts_at(claude_env(info))
    else:
        limit = codex_entry(info)["auto_compact_token_limit"]
    return tokens < limit and tokens + FIRST_ANSWER_ROOM <= window


def claude_env(info: dict) -> dict[str, str]:
    """The environment that makes Claude Code compact inside the model's real window (see the rules above)."""
    window = int(info["context_window"])
    output = max(256, min(32_000, window // 4))
    env = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output)}
    if window >= CLAUDE_WINDOW_FLOOR:
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(window)
        return env
    effective = CLAUDE_WINDOW_FLOOR - min(output, CLAUDE_OUTPUT_RESERVE_CAP)
    target = max(1, window - output - min(CLAUDE_MARGIN, window // 16))
    env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(CLAUDE_WINDOW_FLOOR)
    env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] = f"{int(10_000 * target / effective) / 100:g}"
    return env


def claude_compacts_at(env: dict[str, str]) -> int:
    """The prompt size (tokens) at which Claude Code 2.1.337 compacts under ``env``: its own arithmetic, for tests.
    The compaction window is ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (floored), within the model's window: the one it
    assumes, or ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``."""
    model_window = int(env.get("CLAUDE_CODE_MAX_CONTEXT_TOKENS") or 0) or CLAUDE_ASSUMED_WINDOW  # (0: unset)
    window = min(model_window, max(CLAUDE_WINDOW_FLOOR, int(env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"])))
    effective = window - min(int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]), CLAUDE_OUTPUT_RESERVE_CAP)
    pct = env.get("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE")
    default = effective - 13_000
    return min(int(effective * float(pct) / 100), default) if pct else default
