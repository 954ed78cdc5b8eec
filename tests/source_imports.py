"""The package's source read for its imports: PACKAGE, the tinytitan package's directory, and imports(path), each
import of a module as an absolute module name, with whether it is only under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path


PACKAGE = Path(__file__).resolve().parent.parent / "tinytitan"


def imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module, only under TYPE_CHECKING) for every import in a module."""
    tree = ast.parse(path.read_text())
    package = "tinytitan." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts[:-1])
    checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in checking) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.append((module, id(node) in checking))
    return out
