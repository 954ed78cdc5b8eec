"""Does an agent's first prompt fit the model's window? Said before the agent starts, with what to do instead.

The sizes are each agent's first prompt as measured against ``tinytitan serve --script`` (the demo tokenizer;
a model's own tokenizer counts within about a tenth of it; rounded up by about 5 %: the working directory,
the date and the environment the agent describes move it a little), with the settings ``launch`` gives it, in a
directory with no project instructions. Only ``first_prompt_tokens`` reads them, so a measured source can
replace the table without touching the rest. Claude Code's and Codex's come from ``agents.py`` (the banner's
check, which also knows where each compacts): one number per agent.
"""

from __future__ import annotations

from .. import agents

# agent → (tokens of its first request, the version measured); tests/test_launch.py measures them again
FIRST_PROMPT = {
    "claude": (agents.FIRST_PROMPT_TOKENS["claude-code"], "Claude Code 2.1.337, interactive (tool search on)"),
    "codex": (agents.FIRST_PROMPT_TOKENS["codex"], "Codex 0.171.0, exec, with the server's catalog entry"),
    "opencode": (11_800, "opencode 1.18.33, run: 11,134"),
    "pi": (2_300, "pi 0.73.1, -p: 2,141"),
    "aider": (1_200, "aider 0.86.2, --message, one small file: 1,039"),
    "qwen-code": (29_500, "qwen-code 0.15.10, -p --approval-mode yolo (its usual unattended run: 15 tools): 28,123"),
}
ANSWER_ROOM = agents.FIRST_ANSWER_ROOM  # the least room a first answer needs beside the prompt


def first_prompt_tokens(agent: str) -> int:
    """About how many tokens ``agent``'s first request holds (tools and system prompt included)."""
    return FIRST_PROMPT[agent][0]


def misfit(agent: str, window: int, model: str, scripted: bool) -> str | None:
    """Why ``agent`` cannot start a session on a ``window``-token model, and what to do instead; None if it fits."""
    need = first_prompt_tokens(agent)
    if fits(agent, window, model):
        return None
    from .settings import NAMES

    larger = (f"  - serve with a larger window: --context-window {smallest_window(agent, model)} (or more)\n"
              if scripted else
              "  - serve a model with a larger window (this one's comes from its config)\n")
    return (f"{NAMES[agent]}'s first prompt is about {need:,} tokens (its system prompt and tools), and "
            f"'{model}' has a {window:,}-token window: it cannot fit.\n"
            f"  - chat without tools on the '{model}-fast' name (no system prompt, no tools): --fast\n"
            f"{larger}"
            f"  - start it anyway (every request will be refused as too long): --force")


def fits(agent: str, window: int, model: str) -> bool:
    """Whether ``agent``'s first prompt and a first answer fit a ``window``-token model — for Claude Code and
    Codex also under the point where they are told to compact (agents.py), or they would compact at once."""
    if agent in ("claude", "codex"):
        return agents.first_prompt_fits("claude-code" if agent == "claude" else agent,
                                        {"id": model, "context_window": window})
    return first_prompt_tokens(agent) + ANSWER_ROOM <= window


def smallest_window(agent: str, model: str, step: int = 4096) -> int:
    """The smallest window, in steps of ``step`` tokens, that ``agent``'s first prompt fits."""
    window = -(-(first_prompt_tokens(agent) + ANSWER_ROOM) // step) * step
    while not fits(agent, window, model) and window < 1 << 24:
        window += step
    return window
