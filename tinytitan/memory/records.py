"""A memory record and the checks on what is written (values, importance, confidence, tags).

Rules:
- A value is a string of at most 64 KiB, with no NUL character (PostgreSQL's text holds none, and no
  memory needs one); importance a whole number 1–5; confidence a number 0–1; at most 16
  tags, each a key segment. What is refused is a ``Refused`` naming why (keys.py).
- A record's summary is its value's first non-empty line, at most 200 characters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .keys import Refused, parse_segment

MAX_VALUE_BYTES = 64 * 1024
MAX_TAGS = 16
SUMMARY_CHARS = 200


class WriteFailed(OSError):
    """A record could not be written: nothing changed."""


@dataclass
class Record:
    key: str
    value: str
    importance: int = 3
    confidence: float | None = None
    tags: tuple[str, ...] = ()
    created: float = 0.0
    updated: float = 0.0

    @property
    def summary(self) -> str:
        return summarize(self.value)

    def brief(self) -> dict:
        out = {"key": self.key, "summary": self.summary, "importance": self.importance,
               "updated": _iso(self.updated)}
        if self.tags:
            out["tags"] = list(self.tags)
        return out

    def full(self) -> dict:
        out = {"key": self.key, "value": self.value, "importance": self.importance, "created": _iso(self.created),
               "updated": _iso(self.updated)}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.tags:
            out["tags"] = list(self.tags)
        return out


def summarize(value: str, limit: int = SUMMARY_CHARS) -> str:
    """The first non-empty line, at most ``limit`` characters (an ellipsis marks a cut)."""
    line = next((ln.strip() for ln in value.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def check_value(value: object) -> str:
    if not isinstance(value, str):
        raise Refused("value must be a string")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        raise Refused(f"value is {size} bytes (at most {MAX_VALUE_BYTES})")
    if "\x00" in value:
        raise Refused("value holds a NUL character (\\u0000), which memory does not keep")
    return value


def check_importance(importance: object) -> int:
    if isinstance(importance, bool) or not isinstance(importance, (int, float)) or importance != int(importance) \
            or not 1 <= importance <= 5:
        raise Refused("importance must be a whole number from 1 (trivia) to 5 (must not be forgotten)")
    return int(importance)


def check_confidence(confidence: object) -> float | None:
    if confidence is None:
        return None
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        raise Refused("confidence must be a number from 0 to 1")
    return float(confidence)


def check_tags(tags: object) -> tuple[str, ...]:
    if tags is None:
        return ()
    if not isinstance(tags, list) or len(tags) > MAX_TAGS:
        raise Refused(f"tags must be a list of at most {MAX_TAGS} names")
    return tuple(dict.fromkeys(parse_segment(t, "tag") for t in tags))
