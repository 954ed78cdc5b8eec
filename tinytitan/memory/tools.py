"""The memory tools: their definitions (what the model is shown) and their executor (what the server runs).

Rules:
- ``full`` offers all six tools; ``minimal`` the three an agent needs most (search, get, set); ``off`` none.
- A call's arguments are parsed, not trusted: a bad key, a value too large, an unknown argument, arguments
  that are not a JSON object — each is a tool error naming what is wrong, answered to the model.
- A failed write is a tool error ("not saved"), never a success.
- Results are capped: a list shows at most 100 keys, a search at most 20 hits, with summaries, never whole
  values (``memory_get`` reads one value, itself at most 64 KiB).
- The workspace is the session's; no argument can name another. The calls read and write the database: the
  layer runs them in a worker thread.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..chat_request import Tool
from .keys import Refused
from .records import WriteFailed, check_importance, check_tags
from .workspace import Workspace

log = logging.getLogger("tinytitan.memory")

MAX_LIST = 100
MAX_SEARCH = 20

_KEY = {"type": "string", "description": "a path-like name, e.g. 'build/command' or 'decisions/parser-rewrite'"}
_PREFIX = {"type": "string", "description": "only keys starting with this, e.g. 'build/' (empty: all)"}

DEFINITIONS: dict[str, Tool] = {t.name: t for t in (
    Tool("memory_search", "Search this workspace's memory: keys, tags and values, best match first (summaries).", {
        "type": "object", "properties": {
            "text": {"type": "string", "description": "words to look for"},
            "prefix": _PREFIX,
            "tags": {"type": "array", "items": {"type": "string"}, "description": "every one of these tags"},
            "min_importance": {"type": "integer", "minimum": 1, "maximum": 5},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH}},
        "additionalProperties": False}),
    Tool("memory_get", "Read one memory in full.", {
        "type": "object", "properties": {"key": _KEY}, "required": ["key"], "additionalProperties": False}),
    Tool("memory_list", "List the keys under a prefix, with one-line summaries.", {
        "type": "object", "properties": {"prefix": _PREFIX}, "additionalProperties": False}),
    Tool("memory_set", "Write a memory (replaces the value; the key keeps its creation time).", {
        "type": "object", "properties": {
            "key": _KEY,
            "value": {"type": "string", "description": "the fact, first line a summary (at most 64 KiB)"},
            "importance": {"type": "integer", "minimum": 1, "maximum": 5,
                           "description": "1 trivia … 5 must not be forgotten (default 3)"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["key", "value"], "additionalProperties": False}),
    Tool("memory_append", "Add a line to a memory (creates it when absent).", {
        "type": "object", "properties": {"key": _KEY, "text": {"type": "string"}}, "required": ["key", "text"],
        "additionalProperties": False}),
    Tool("memory_delete", "Delete a memory that is wrong or no longer true.", {
        "type": "object", "properties": {"key": _KEY}, "required": ["key"], "additionalProperties": False}),
)}

MODES = {
    "off": (),
    "minimal": ("memory_search", "memory_get", "memory_set"),
    "full": tuple(DEFINITIONS),
}


def definitions(mode: str) -> tuple[Tool, ...]:
    return tuple(DEFINITIONS[name] for name in MODES[mode])


def _args(arguments: str, allowed: set[str], required: set[str]) -> dict:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        raise Refused("the arguments are not valid JSON") from None
    if not isinstance(args, dict):
        raise Refused("the arguments must be a JSON object")
    unknown = sorted(set(args) - allowed)
    if unknown:
        raise Refused(f"unknown argument(s): {', '.join(unknown)} (this tool takes {', '.join(sorted(allowed))})")
    missing = sorted(required - {k for k, v in args.items() if v is not None})
    if missing:
        raise Refused(f"missing argument(s): {', '.join(missing)}")
    return args


def _run(workspace: Workspace, name: str, arguments: str) -> dict[str, Any]:
    props = DEFINITIONS[name].parameters["properties"]
    args = _args(arguments, set(props), set(DEFINITIONS[name].parameters.get("required", ())))
    if name == "memory_get":
        rec = workspace.get(args["key"])
        return rec.full() if rec else {"key": args["key"], "found": False}
    if name == "memory_list":
        prefix = args.get("prefix") or ""
        recs = workspace.list(prefix, limit=MAX_LIST, brief=True)
        count = workspace.count(prefix) if len(recs) == MAX_LIST else len(recs)
        out: dict[str, Any] = {"keys": [r.brief() for r in recs], "count": count}
        if count > MAX_LIST:
            out["note"] = f"the first {MAX_LIST} of {count} keys; narrow the prefix to see the rest"
        return out
    if name == "memory_search":
        limit = args.get("limit") or 10
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH:
            raise Refused(f"limit must be a whole number from 1 to {MAX_SEARCH}")
        text = args.get("text") or ""
        if not isinstance(text, str):
            raise Refused("text must be a string")
        hits = workspace.search(text, args.get("prefix") or "", check_tags(args.get("tags")),
                              check_importance(args.get("min_importance") or 1), limit)
        return {"results": [r.brief() for r in hits]}
    if name == "memory_set":
        rec = workspace.set(args["key"], args["value"], args.get("importance"), args.get("confidence"), args.get("tags"))
        return {"saved": rec.key, "created": rec.full()["created"], **_durability(workspace)}
    if name == "memory_append":
        rec = workspace.append(args["key"], args["text"])
        return {"appended": rec.key, "bytes": len(rec.value.encode("utf-8", "replace")), **_durability(workspace)}
    if name == "memory_delete":
        return {"deleted": args["key"], "existed": workspace.delete(args["key"]), **_durability(workspace)}
    raise Refused(f"no memory tool named {name!r}")


def _durability(workspace: Workspace) -> dict:
    return {} if workspace.persistent else {"note": "kept for this session only: " + (workspace.why_not or "")}


def execute(workspace: Workspace, name: str, arguments: str) -> tuple[str, bool]:
    """Run one memory call: (the result as JSON text, whether it succeeded)."""
    try:
        return json.dumps(_run(workspace, name, arguments), ensure_ascii=False), True
    except Refused as exc:
        return json.dumps({"error": str(exc)}, ensure_ascii=False), False
    except WriteFailed as exc:
        return json.dumps({"error": f"not saved: {exc.strerror or exc}"}, ensure_ascii=False), False
    except Exception as exc:  # a bug here must not fail the completion; the model is told it did not work
        log.exception("memory %s failed", name)
        return json.dumps({"error": f"the memory tool failed ({type(exc).__name__}); nothing was changed "
                                    "unless a later read shows it"}), False
