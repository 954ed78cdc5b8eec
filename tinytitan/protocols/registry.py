"""The protocols this server speaks (each one a spec table plus its module)."""

from __future__ import annotations

from pathlib import Path

from .anthropic_messages import AnthropicMessages
from .base import Protocol
from .ollama import Ollama
from .openai_chat import OpenAIChat
from .openai_completions import OpenAICompletions
from .openai_responses import OpenAIResponses
from .shared import Shared

PROTOCOLS: list[type[Protocol]] = [Shared, OpenAIChat, OpenAIResponses, AnthropicMessages, Ollama,
                                   OpenAICompletions]


def all_protocols(spec_directory: Path | None = None) -> list[Protocol]:
    return [cls(spec_directory) for cls in PROTOCOLS]
