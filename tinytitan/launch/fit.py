"""Does an agent's first prompt fit the model's window? Said before the agent starts, with what to do instead.

The sizes are each agent's first prompt as measured against ``tinytitan serve --script`` (the demo tokenizer;
a model's own tokenizer counts within about a tenth of it; rounded up by about 5 %: the working directory,
the date and the environment the agent describes move it a little), with the settings ``launch`` gives it, in a
directory with no project instructions. Only ``first_prompt_tokens`` reads them, so a measured source can
replace the table without touching the rest.
"""

from __future__ import annotations

# agent → (tokens of its first request, the version measured); tests/test_launch.py measures them again
FIRST_PROMPT = {
    "claude": (19_500, "Claude Code 2.1.332, -p (tool search on): 18,537"),
    "codex": (8_700, "Codex 0.171.0, exec, with the launch catalog: 8,225"),
    "opencode": (11_800, "opencode 1.18.33, run: 11,134"),
    "pi": (2_300, "pi 0.73.1, -p: 2,141"),
    "aider": (1_200, "aider 0.86.2, --message, one small file: 1,039"),
    "qwen-code": (25_000, "qwen-code 0.15.10, -p: 23,926"),
}
ANSWER_ROOM = 1024  # the least room a first answer needs beside the prompt


def first_prompt_tokens(agent: str) -> int:
    """About how many tokens ``agent``'s first request holds (tools and system prompt included)."""
    return FIRST_PROMPT[agent][0]


def misfit(agent: str, window: int, model: str, scripted: bool) -> str | None:
    """Why ``agent`` cannot start a session on a ``window``-token model, and what to do instead; None if it fits."""
    need = first_prompt_tokens(agent)
    if need + ANSWER_ROOM <= window:
        return None
    from .settings import NAMES

    larger = (f"  - serve with a larger window: --context-window {_round_up(need + ANSWER_ROOM)} (or more)\n"
              if scripted else
              "  - serve a model with a larger window (this one's comes from its config)\n")
    return (f"{NAMES[agent]}'s first prompt is about {need:,} tokens (its system prompt and tools), and "
            f"'{model}' has a {window:,}-token window: it cannot fit.\n"
            f"  - chat without tools on the '{model}-fast' name (no system prompt, no tools): --fast\n"
            f"{larger}"
            f"  - start it anyway (every request will be refused as too long): --force")


def _round_up(tokens: int) -> int:
    step = 4096
    return -(-tokens // step) * step
