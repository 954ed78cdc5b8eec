"""The names a served model answers to: its id, and its id with Ollama's ``:latest`` tag (what ``ollama list`` shows,
copied into any client; Ollama's own /v1 takes it too)."""

from __future__ import annotations

LATEST = ":latest"


def spellings(name: str) -> tuple[str, ...]:
    """The ids ``name`` may mean, in the order to try them: the name as given (a served id may itself end in
    ``:latest``, ``--model-id``), then without the tag."""
    return tuple(dict.fromkeys((name, name.removesuffix(LATEST))))
