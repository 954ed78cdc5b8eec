"""Field paths as the spec tables write them: ``a.b``, ``items[]`` (every element), ``items[3]``, and
``items[type=document]`` (every element that is an object whose ``type`` is the string ``document``).

``reach(doc, "messages[].content[].type")`` gives ``(place, value)`` for every place the path reaches, the place
as its steps (``spell`` writes it ``messages[3].content[0].type``); a step that does not apply (a list step on a
string, a missing key) reaches nothing.
"""

from __future__ import annotations

import re
from typing import Any, Callable

_STEP = re.compile(r"([^.\[\]]+)|\[(\d*)\]|\[([^\]=]+)=([^\]]*)\]")
MISSING = object()


def steps(path: str) -> list[str | int | tuple | None]:
    """``"a.b[].c[2].d[type=x]"`` → ``["a", "b", None, "c", 2, "d", ("type", "x")]`` (None: every element; a
    pair: every element whose key holds that string)."""
    out: list[str | int | tuple | None] = []
    for name, index, key, value in _STEP.findall(path):
        if name:
            out.append(name)
        elif key:
            out.append((key, value))
        else:
            out.append(int(index) if index else None)
    return out


def reach(doc: Any, path: str) -> list[tuple[tuple, Any]]:
    """Every place ``path`` reaches in ``doc``, as its steps (``("messages", 3, "content", 0, "type")``):
    spelled only where it is needed (``spell``), since a refusal rule walks every message of an agent's
    conversation each turn and names a place only when it refuses."""
    out: list[tuple[tuple, Any]] = []
    _reach(doc, steps(path), 0, (), out)
    return out


def spell(parts: tuple) -> str:
    """``("messages", 3, "type")`` → ``"messages[3].type"``."""
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(parts))


def pattern(parts: tuple) -> str:
    """A place's steps as the spec's tables write its path: ``("messages", 3, "content", 0)`` →
    ``messages[].content[]``."""
    return "".join("[]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(parts))


def loc(doc: Any, parts: tuple, tagged: dict | None = None) -> str:
    """A place as pydantic writes it (the Anthropic API's errors): steps joined by dots (``messages.0.content``),
    and after an object at a ``tagged`` path (``thinking``, ``tools[]``: one of several shapes told apart by a
    key) that key's value, as the shape's name (``thinking.adaptive.foo``). A tag is the key's name, or
    ``{key, default}`` where an object without the key is one shape (``tools.0.custom.foo``). A place at the key
    itself is not given the shape's name (``image.source.type``): pydantic names a tag it cannot read at the union."""
    out: list[str] = []
    pattern, node = "", doc
    for n, p in enumerate(parts):
        node = node[p] if isinstance(node, (dict, list)) and _has(node, p) else MISSING
        pattern += "[]" if isinstance(p, int) else (f".{p}" if pattern else p)
        out.append(str(p))
        tag = (tagged or {}).get(pattern)
        key, default = (tag, None) if isinstance(tag, str) else ((tag or {}).get("key"), (tag or {}).get("default"))
        if key and isinstance(node, dict) and tuple(parts[n + 1:n + 2]) != (key,):
            name = node.get(key, default)
            if isinstance(name, str):
                out.append(name)
    return ".".join(out)


def _has(node: Any, step: Any) -> bool:
    if isinstance(node, dict):
        return step in node
    return isinstance(step, int) and -len(node) <= step < len(node)


def _reach(node: Any, path: list, at: int, here: tuple, out: list) -> None:
    while at < len(path):
        step = path[at]
        at += 1
        if isinstance(step, str):
            if not isinstance(node, dict) or step not in node:
                return
            node, here = node[step], here + (step,)
        elif step is None or isinstance(step, tuple):
            if isinstance(node, list):
                for i, item in enumerate(node):
                    if step is None or (isinstance(item, dict) and item.get(step[0]) == step[1]):
                        _reach(item, path, at, here + (i,), out)
            return
        elif isinstance(node, list) and -len(node) <= step < len(node):
            node, here = node[step], here + (step,)
        else:
            return
    out.append((here, node))


def lower(doc: Any, path: str) -> None:
    """Every string ``path`` reaches in ``doc`` put in lower case, in place (``request.lowercase``)."""
    for parts, value in reach(doc, path):
        if isinstance(value, str) and parts:
            node = doc
            for step in parts[:-1]:
                node = node[step]
            node[parts[-1]] = value.lower()


def getter(path: str) -> Callable[[Any], Any]:
    """``get`` of one path, its steps read once (a stream template looks the same paths up at every token):
    ``getter(path)(doc)`` is ``get(doc, path)``."""
    parts = steps(path)
    if len(parts) == 1 and isinstance(parts[0], str):  # a context name (``id``, ``model``)
        name = parts[0]

        def one(doc: Any) -> Any:
            if isinstance(doc, dict):
                return doc.get(name, MISSING)
            return getattr(doc, name, MISSING)
        return one

    return lambda doc: _walk(doc, parts)


def get(doc: Any, path: str, default: Any = MISSING) -> Any:
    """The single value at a path without wildcards; attributes work as well as keys."""
    value = _walk(doc, steps(path))
    return default if value is MISSING else value


def _walk(node: Any, parts: list) -> Any:
    """The value ``parts`` (a path's steps, no wildcard) reach from ``node``; MISSING where none."""
    for step in parts:
        if isinstance(node, dict):
            if step not in node:
                return MISSING
            node = node[step]
        elif isinstance(step, int) and isinstance(node, (list, tuple)):
            if not -len(node) <= step < len(node):
                return MISSING
            node = node[step]
        elif isinstance(step, str) and hasattr(node, step):
            node = getattr(node, step)
        else:
            return MISSING
    return node
