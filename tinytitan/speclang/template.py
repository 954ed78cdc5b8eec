"""Payload templates of the spec tables.

Rules:
- A string that is exactly ``$path`` becomes the value at ``path`` in the context (any type).
  ``$path|table`` then maps it through the spec's ``maps.table``.
- ``${path}`` inside a longer string interpolates the value as text. ``$$`` is a literal ``$``.
- A key ending in ``?`` is written without the ``?``, and left out when its value is ``None``.
- A context value that is callable is called (with no arguments) when looked up: the protocol's
  Python supplies computed values this way (the spec names them, Python computes them).
- Looking up a path the context does not have is an error: a spec typo fails loudly.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from . import paths

_WHOLE = re.compile(r"^\$([A-Za-z_][\w.\[\]]*)(?:\|(\w+))?$")
_INNER = re.compile(r"\$\$|\$\{([A-Za-z_][\w.\[\]]*)(?:\|(\w+))?\}")


class TemplateError(LookupError):
    pass


def lookup(context: Mapping[str, Any], path: str, maps: Mapping[str, Mapping] | None = None,
           table: str | None = None) -> Any:
    value = paths.get(context, path)
    if value is paths.MISSING:
        raise TemplateError(f"template names ${path}, which this context does not have")
    if callable(value):
        value = value()
    if table:
        mapping = (maps or {}).get(table)
        if mapping is None:
            raise TemplateError(f"template names map '{table}', which the spec does not declare")
        if value not in mapping:
            raise TemplateError(f"map '{table}' has no entry for {value!r}")
        value = mapping[value]
    return value


def render(template: Any, context: Mapping[str, Any], maps: Mapping[str, Mapping] | None = None) -> Any:
    if isinstance(template, str):
        whole = _WHOLE.match(template)
        if whole:
            return lookup(context, whole.group(1), maps, whole.group(2))
        if "$" not in template:
            return template

        def sub(m: re.Match) -> str:
            if m.group(0) == "$$":
                return "$"
            v = lookup(context, m.group(1), maps, m.group(2))
            return "" if v is None else str(v)

        return _INNER.sub(sub, template)
    if isinstance(template, dict):
        out = {}
        for key, sub_t in template.items():
            value = render(sub_t, context, maps)
            if key.endswith("?"):
                if value is None:
                    continue
                key = key[:-1]
            out[key] = value
        return out
    if isinstance(template, list):
        return [render(t, context, maps) for t in template]
    return template


def lookups(template: Any) -> set[str]:
    """Every context path a template looks up (``ev.usage.prompt_tokens``), for checking a spec at load."""
    found: set[str] = set()
    if isinstance(template, str):
        whole = _WHOLE.match(template)
        if whole:
            found.add(whole.group(1))
        else:
            found |= {m.group(1) for m in _INNER.finditer(template) if m.group(1)}
    elif isinstance(template, dict):
        for v in template.values():
            found |= lookups(v)
    elif isinstance(template, list):
        for v in template:
            found |= lookups(v)
    return found


def map_names(template: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(template, str):
        for m in [_WHOLE.match(template)] + list(_INNER.finditer(template)):
            if m and m.group(0) != "$$" and m.group(2):
                found.add(m.group(2))
    elif isinstance(template, dict):
        for v in template.values():
            found |= map_names(v)
    elif isinstance(template, list):
        for v in template:
            found |= map_names(v)
    return found
