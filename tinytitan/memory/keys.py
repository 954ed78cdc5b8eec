"""Memory keys and scope parts: parsed, never trusted.

Rules:
- A key is ``segment(/segment)*``; a segment is letters, digits, ``.``, ``_``, ``-`` and must not start with
  ``.`` (so ``.`` and ``..`` cannot appear). At most 8 segments, 64 characters each, 200 in all.
- A prefix (for list and search) is a key, optionally ending in ``/``, or empty (everything).
- A scope part (namespace, user) is one segment.
- What is refused is named: traversal, a separator other than ``/``, a glob character, a control character,
  an empty segment, a length. The refusal is a ``Refused`` (a ValueError): the memory tools answer it to the
  model as a tool error, the CLI prints it.
"""

from __future__ import annotations

import re

MAX_KEY = 200
MAX_SEGMENT = 64
MAX_SEGMENTS = 8

_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_GLOB = set("*?[]{}")


class Refused(ValueError):
    """A key, prefix or scope part that is not allowed; the message says why."""


def _check_characters(text: str, what: str) -> None:
    for ch in text:
        if ord(ch) < 32 or ord(ch) == 127:
            raise Refused(f"{what} contains a control character (U+{ord(ch):04X})")
        if ch == "\\":
            raise Refused(f"{what} contains '\\': segments are separated by '/' only")
        if ch in _GLOB:
            raise Refused(f"{what} contains the glob character {ch!r}: keys are exact names")


def parse_segment(part: str, what: str = "segment") -> str:
    if not isinstance(part, str):
        raise Refused(f"{what} must be a string")
    _check_characters(part, what)
    if part == "":
        raise Refused(f"{what} is empty")
    if part in (".", "..") or part.startswith("."):
        raise Refused(f"{what} {part!r} starts with '.' (no traversal or hidden names)")
    if len(part) > MAX_SEGMENT:
        raise Refused(f"{what} is {len(part)} characters long (at most {MAX_SEGMENT})")
    if not _SEGMENT.fullmatch(part):
        bad = next(ch for ch in part if not re.fullmatch(r"[A-Za-z0-9._-]", ch))
        raise Refused(f"{what} {part!r} contains {bad!r}: use letters, digits, '.', '_' and '-'")
    return part


def parse_key(key: object) -> str:
    if not isinstance(key, str):
        raise Refused("key must be a string")
    _check_characters(key, "key")
    if len(key) > MAX_KEY:
        raise Refused(f"key is {len(key)} characters long (at most {MAX_KEY})")
    if key.startswith("/"):
        raise Refused("key starts with '/': keys are relative names like 'build/command'")
    parts = key.split("/")
    if len(parts) > MAX_SEGMENTS:
        raise Refused(f"key has {len(parts)} segments (at most {MAX_SEGMENTS})")
    for part in parts:
        if part == "":
            raise Refused(f"key {key!r} has an empty segment")
        parse_segment(part, "key segment")
    return key


def parse_prefix(prefix: object) -> str:
    """A key prefix: '' (everything), a key, or a key followed by '/'."""
    if prefix is None or prefix == "":
        return ""
    if not isinstance(prefix, str):
        raise Refused("prefix must be a string")
    parse_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def under(key: str, prefix: str) -> bool:
    """Whether ``key`` lies under ``prefix``: 'a/' and 'a' both hold 'a/b'; 'a' also holds 'a' and 'ab'."""
    return key.startswith(prefix)
