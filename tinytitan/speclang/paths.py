"""Field paths as the spec tables write them: ``a.b``, ``items[]`` (every element), ``items[3]``.

``walk(doc, "messages[].content[].type")`` yields ``(concrete_path, value)`` for every place the path
reaches; a step that does not apply (a list step on a string, a missing key) reaches nothing.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

_STEP = re.compile(r"([^.\[\]]+)|\[(\d*)\]")
MISSING = object()


def steps(path: str) -> list[str | int | None]:
    """``"a.b[].c[2]"`` → ``["a", "b", None, "c", 2]`` (None: every element)."""
    out: list[str | int | None] = []
    for name, index in _STEP.findall(path):
        if name:
            out.append(name)
        else:
            out.append(int(index) if index else None)
    return out


def walk(doc: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield from _walk(doc, steps(path), "")


def _walk(node: Any, rest: list, here: str) -> Iterator[tuple[str, Any]]:
    if not rest:
        yield here, node
        return
    step, tail = rest[0], rest[1:]
    if isinstance(step, str):
        if isinstance(node, dict) and step in node:
            yield from _walk(node[step], tail, f"{here}.{step}" if here else step)
    elif step is None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                yield from _walk(item, tail, f"{here}[{i}]")
    elif isinstance(node, list) and -len(node) <= step < len(node):
        yield from _walk(node[step], tail, f"{here}[{step}]")


def get(doc: Any, path: str, default: Any = MISSING) -> Any:
    """The single value at a path without wildcards; attributes work as well as keys."""
    node = doc
    for step in steps(path):
        if isinstance(node, dict):
            if step not in node:
                return default
            node = node[step]
        elif isinstance(step, int) and isinstance(node, (list, tuple)):
            if not -len(node) <= step < len(node):
                return default
            node = node[step]
        elif isinstance(step, str) and hasattr(node, step):
            node = getattr(node, step)
        else:
            return default
    return node
