"""A request field's JSON Schema, as a validator that remembers the items of its array it found valid.

Rules:
- An agent sends its whole conversation again every turn: the same messages, the same tools, a few new items at
  the end. Validated from scratch, a Claude Code-shaped body of 100 KB (161 messages, 20 tools) took 26 ms on
  every turn, before the prompt was even rendered.
- So a field whose schema is an array of ``items`` validates each item it has not seen before, and skips an item
  whose exact JSON text it already found valid against the same schema (a digest of it: a schema is a pure
  function of the instance, so the answer cannot have changed). Only the field's own ``items`` is remembered,
  not items nested deeper (their text is inside their parent's).
- Errors are what the schema's own ``items`` keyword gives: an item that fails is validated as before, and a
  valid item yields no error either way, so ``best_match`` picks the same error, in the same words.
- The digest stands for the item wherever the field's ``items`` schema means one thing, as in every spec here:
  a ``$dynamicRef`` in it (none is used) could make the same schema mean another under another dynamic scope.
- Only valid items are remembered, at most ``REMEMBERED_ITEMS`` per field (the least recently seen go first);
  the memory is shared by the request handlers' worker threads, behind a lock.
- A ``pattern`` is read as JSON Schema's (ECMA-262) regex: its ``$`` ends the string. Python's ``$`` also
  matches before a final newline, so ``"Bash\\n"`` would pass ``^[a-zA-Z0-9_-]+$`` as a tool's name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

import jsonschema

from ..memo import BoundedMemo

REMEMBERED_ITEMS = 4096  # valid items remembered per field (16-byte digests)

_ITEMS = jsonschema.Draft202012Validator.VALIDATORS["items"]  # the keyword as the draft defines it


@functools.lru_cache(maxsize=256)
def _ecma(pattern: str) -> re.Pattern:
    """``pattern`` with each ``$`` outside a character class made ``\\Z``: the end of the string, as ECMA's."""
    out, escaped, in_class = [], False, False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "[]":
            in_class = ch == "["
        elif ch == "$" and not in_class:
            ch = r"\Z"
        out.append(ch)
    return re.compile("".join(out))


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _ecma(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_ECMA = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern})


class _Seen:
    """Digests of items found valid, least recently seen first."""

    def __init__(self, limit: int):
        self.limit = limit
        self._digests: BoundedMemo[bytes, bool] = BoundedMemo(limit)

    @staticmethod
    def digest(item: Any) -> bytes:
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def known(self, digest: bytes) -> bool:
        return self._digests.get(digest, False)

    def add(self, digest: bytes) -> None:
        self._digests.put(digest, True)


def field_validator(schema: dict, limit: int = REMEMBERED_ITEMS) -> jsonschema.protocols.Validator:
    """A Draft 2020-12 validator for ``schema`` (its patterns ECMA's); where it is an array of ``items``, one that
    remembers the items it found valid (see the rules)."""
    top = schema.get("items") if isinstance(schema, dict) else None
    if not isinstance(top, dict) or schema.get("prefixItems"):
        return _ECMA(schema)
    seen = _Seen(limit)

    def items(validator, items_schema, instance, where):
        if items_schema is not top or not isinstance(instance, list):
            yield from _ITEMS(validator, items_schema, instance, where)
            return
        for index, item in enumerate(instance):
            digest = seen.digest(item)
            if seen.known(digest):
                continue
            errors = list(validator.descend(item, items_schema, path=index))
            if errors:
                yield from errors
            else:
                seen.add(digest)

    remembering = jsonschema.validators.extend(_ECMA, {"items": items})
    return remembering(schema)
