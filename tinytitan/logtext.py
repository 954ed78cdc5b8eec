"""Model or client text in a log line: never at info or warning (the log carries no prompt or answer text:
docs/operating.md); at debug, which an operator turns on to read what a parser could not, its first 200
characters."""

from __future__ import annotations

import logging

EXCERPT = 200


def excerpt(log: logging.Logger, text: str) -> str:
    """``text`` as a log line may hold it: its length, or (``log`` at debug) its first characters too."""
    if log.isEnabledFor(logging.DEBUG):
        return repr(text[:EXCERPT])
    return f"({len(text)} characters; --log-level debug shows them)"
