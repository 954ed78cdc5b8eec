"""Which client sent a request, from its User-Agent: a short name for the log, the metrics and the dashboard."""

from __future__ import annotations

import re

# (pattern on the User-Agent, the name shown); the first match wins, so specific names come first
CLIENTS: tuple[tuple[str, str], ...] = (
    (r"claude-cli|claude-code", "Claude Code"),
    (r"codex", "Codex"),
    (r"opencode", "OpenCode"),
    (r"aider", "Aider"),
    (r"qwen-code|QwenCode", "Qwen Code"),
    (r"\bpi-coding-agent|\bpi/", "pi"),
    (r"litellm", "LiteLLM"),
    (r"langchain", "LangChain"),
    (r"ai-sdk|vercel", "Vercel AI SDK"),
    (r"^(Async)?OpenAI/Python", "openai-python"),
    (r"^(Async)?OpenAI/JS", "openai-node"),
    (r"^(Async)?Anthropic/Python", "anthropic-python"),
    (r"^(Async)?Anthropic/JS", "anthropic-typescript"),
    (r"^ollama", "ollama"),
    (r"python-httpx", "httpx"),
    (r"python-requests", "requests"),
    (r"^curl/", "curl"),
    (r"Prometheus", "Prometheus"),
    (r"^Mozilla/", "browser"),
)
_COMPILED = tuple((re.compile(p, re.IGNORECASE), name) for p, name in CLIENTS)


def client_name(user_agent: str | None) -> str:
    """The client's name; an unknown User-Agent is named by its first product token (never its whole text)."""
    ua = (user_agent or "").strip()
    if not ua:
        return "unknown"
    for pattern, name in _COMPILED:
        if pattern.search(ua):
            return name
    return ua.split()[0].split("/")[0][:40] or "unknown"
