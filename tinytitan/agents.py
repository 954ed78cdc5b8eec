"""What the coding agents must be told about the served models, since neither learns it from the server.

Rules:
- Codex (0.171) reads a model's metadata only from a ``model_catalog_json`` file, never from the provider:
  context window, auto-compaction limit, reasoning levels, ``apply_patch_tool_type`` (freeform: its Lark-grammar
  ``apply_patch`` tool) and the base instructions (a short coding-agent prompt instead of the fallback's long
  one). ``write_codex_catalog`` writes one entry per served model, from each model's own config, at every start.
- Claude Code (2.1.197) assumes a 200k window for a model it does not know and reads no limits from
  ``/v1/models`` (its capability fetch is off; its gateway discovery lists only ``claude*`` / ``anthropic*`` ids
  in the model picker). Its environment sets the window: ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (at least 100,000,
  the bundle's floor), ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, and, for a window under that floor,
  ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``: compaction at that percentage of the effective window (the window less
  the output reserve, at most 20,000), placed so the prompt plus the output cap fits the real window.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CODEX_INSTRUCTIONS = """You are a coding agent working in the user's terminal and repository, on a model served locally.
Read before you change: inspect files with the shell, keep changes small and focused, and apply edits with the
apply_patch tool. Run the project's tests or commands when they show whether a change works. When the task is
done, say briefly what you changed and how you checked it; if you could not finish, say what is left."""

CLAUDE_WINDOW_FLOOR = 100_000  # the least CLAUDE_CODE_AUTO_COMPACT_WINDOW Claude Code 2.1.197 takes
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
        "experimental_supported_tools": [],
        # ["text"]: Codex does not offer view_image (a text model refuses images); ["text", "image"]: it sends them
        "input_modalities": list(info.get("input_modalities") or ["text"]),
    }
    if default is not None:
        entry["default_reasoning_level"] = default
    return entry


def codex_catalog_path(cache: Path) -> Path:
    return cache / "codex" / "model_catalog.json"


def write_codex_catalog(models: list[dict], path: Path) -> Path:
    """The catalog of ``models`` (the engine's ``models()``), written atomically at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"models": [codex_entry(m) for m in models]}, indent=1))
    os.replace(tmp, path)
    return path


def claude_env(info: dict) -> dict[str, str]:
    """The environment that makes Claude Code compact inside the model's real window (see the rules above)."""
    window = int(info["context_window"])
    output = max(256, min(32_000, window // 4))
    env = {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output)}
    if window >= CLAUDE_WINDOW_FLOOR:
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(window)
        return env
    effective = CLAUDE_WINDOW_FLOOR - min(output, CLAUDE_OUTPUT_RESERVE_CAP)
    target = max(1, window - output - min(CLAUDE_MARGIN, window // 16))
    env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(CLAUDE_WINDOW_FLOOR)
    env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] = f"{int(10_000 * target / effective) / 100:g}"
    return env


def claude_compacts_at(env: dict[str, str]) -> int:
    """The prompt size (tokens) at which Claude Code compacts under ``env``: its own arithmetic, for tests."""
    window = int(env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"])
    effective = window - min(int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]), CLAUDE_OUTPUT_RESERVE_CAP)
    pct = env.get("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE")
    default = effective - 13_000
    return min(int(effective * float(pct) / 100), default) if pct else default
