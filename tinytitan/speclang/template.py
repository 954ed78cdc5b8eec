"""Payload templates of the spec tables.

Rules:
- A string that is exactly ``$path`` becomes the value at ``path`` in the context (any type).
  ``$path|table`` then maps it through the spec's ``maps.table``.
- ``${path}`` inside a longer string interpolates the value as text. ``$$`` is a literal ``$``.
- A key ending in ``?`` is written without the ``?``, and left out when its value is ``None``.
- A context value that is callable is called (with no arguments) when looked up: the protocol's
  Python supplies computed values this way (the spec names them, Python computes them).
- Looking up a path the context does not have is an error: a spec typo fails loudly.
- A stream's event templates are compiled once, when the spec loads (``compile_event``): a function of the context
  that renders what ``render`` renders, its paths parsed and its literal parts read only then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import paths

_WHOLE = re.compile(r"^\$([A-Za-z_][\w.\[\]]*)(?:\|(\w+))?$")
_INNER = re.compile(r"\$\$|\$\{([A-Za-z_][\w.\[\]]*)(?:\|(\w+))?\}")


class TemplateError(LookupError):
    pass


def lookup(context: Mapping[str, Any], path: str, maps: Mapping[str, Mapping] | None = None,
           table: str | None = None) -> Any:
    return _resolved(paths.get(context, path), path, (maps or {}).get(table) if table else None, table)


def _resolved(value: Any, path: str, mapping: Mapping | None, table: str | None) -> Any:
    """The value found at ``path`` (``paths.MISSING``: none), called where callable, through the map ``table``
    (``mapping``: that map, None where the spec has none)."""
    if value is paths.MISSING:
        raise TemplateError(f"template names ${path}, which this context does not have")
    if callable(value):
        value = value()
    if table:
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


Compiled = Callable[[Mapping[str, Any]], Any]


def compile_template(template: Any, maps: Mapping[str, Mapping] | None = None) -> Compiled:
    """``render`` of one template as a function of the context, the template read once: its paths parsed, its
    literal parts kept as they are (a stream renders the same event templates at every token).
    ``compile_template(t, maps)(ctx)`` is ``render(t, ctx, maps)``: the same value, the same lookups in the same
    order, a fresh object each call, the same errors."""
    if isinstance(template, str):
        whole = _WHOLE.match(template)
        if whole:
            return _compiled_lookup(whole.group(1), maps, whole.group(2))
        if "$" not in template:
            return lambda ctx: template
        pieces: list[Any] = []  # literal text, or a lookup
        at = 0
        for m in _INNER.finditer(template):
            pieces.append(template[at:m.start()])
            pieces.append("$" if m.group(0) == "$$" else _compiled_lookup(m.group(1), maps, m.group(2)))
            at = m.end()
        pieces.append(template[at:])
        pieces = [p for p in pieces if p != ""]

        def interpolate(ctx: Mapping[str, Any]) -> str:
            out = []
            for p in pieces:
                if p.__class__ is str:
                    out.append(p)
                else:
                    v = p(ctx)
                    out.append("" if v is None else str(v))
            return "".join(out)
        return interpolate
    if isinstance(template, dict):
        items = [(key[:-1] if key.endswith("?") else key, key.endswith("?"), compile_template(sub_t, maps))
                 for key, sub_t in template.items()]
        if not any(optional for _, optional, _ in items):
            plain = [(key, fn) for key, _, fn in items]
            return lambda ctx: {key: fn(ctx) for key, fn in plain}

        def obj(ctx: Mapping[str, Any]) -> dict:
            out = {}
            for key, optional, fn in items:
                value = fn(ctx)
                if optional and value is None:
                    continue
                out[key] = value
            return out
        return obj
    if isinstance(template, list):
        fns = [compile_template(t, maps) for t in template]
        return lambda ctx: [fn(ctx) for fn in fns]
    return lambda ctx: template


def _compiled_lookup(path: str, maps: Mapping[str, Mapping] | None, table: str | None) -> Compiled:
    get = paths.getter(path)
    mapping = (maps or {}).get(table) if table else None

    def look(ctx: Mapping[str, Any]) -> Any:
        return _resolved(get(ctx), path, mapping, table)
    return look


@dataclass(frozen=True)
class EventTemplate:
    """One ``stream.events`` entry, compiled: its ``data`` and ``event`` templates, and its ``when`` (a lookup
    whose truth, or with ``!`` whose falsehood, lets the event be written)."""

    data: Compiled
    event: Compiled | None
    when: Compiled | None
    unless: bool


def compile_event(entry: Mapping[str, Any], maps: Mapping[str, Mapping] | None) -> EventTemplate:
    when = entry.get("when")
    return EventTemplate(compile_template(entry["data"], maps),
                         compile_template(entry["event"], maps) if "event" in entry else None,
                         _compiled_lookup(when.removeprefix("!"), None, None) if when else None,
                         bool(when) and when.startswith("!"))
