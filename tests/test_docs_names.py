"""The documentation names only files that are there: every file path that a page of docs/, README.md,
spec/README.md or tools/README.md names — in prose or code, ``tinytitan/…py``, ``tests/…py``, ``tools/…py``,
``spec/*.yaml``, ``grammars/*.lark``, a ``.md`` page — is a file of the tree.

Rules:
- A path is taken from the repository's root first; otherwise it is a partial path (``decode/step.py``,
  ``scheduler.py``) and exactly one file must end with it: none is a stale name, several an ambiguous one.
- ``*`` and ``<placeholder>`` stand for any part of a name (``tests/test_spec_*.py``,
  ``tinytitan/protocols/<name>.py``): at least one file must match.
- Link targets are not read here (the strict site build checks those), nor URLs, nor home-directory paths.
- A file a page names on purpose that is not this project's — the reader's own, another program's — is in
  ``OTHERS``, with why.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ROOT / "spec" / "README.md",
         ROOT / "tools" / "README.md"]
TREE = ("tinytitan", "tests", "tools", "spec", "grammars", "docs", ".ci")
SKIP_DIRS = {"__pycache__", ".pytest_cache", "site"}

OTHERS = {
    "OLD.py": "the entry point of an older checkout, as given to --tinytitan-entry",
    "OLD.md": "an older README, as given to tools/docs_coverage.py",
    "main.py": "a file of the reader's own project, in the agents' examples",
    "extra-openai-models.yaml": "the llm tool's own model list",
}

SEGMENT = r"(?:[\w*-]|<[\w -]+>)(?:[\w.*-]|<[\w -]+>)*"
PATH = re.compile(rf"(?<![\w./~$@:<>-])((?:{SEGMENT}/)*{SEGMENT}\.(?:py|yaml|yml|lark|md))(?![\w/-])")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def tree_files(root: Path = ROOT) -> list[str]:
    """The tree's files, as paths from the root (``/``-separated)."""
    files = [p.name for p in root.iterdir() if p.is_file()]
    for top in TREE:
        for here, dirs, names in os.walk(root / top):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            rel = Path(here).relative_to(root).as_posix()
            files += [f"{rel}/{n}" for n in names]
    return files


def matching(name: str, files: list[str], by_name: dict[str, list[str]]) -> list[str]:
    """The files ``name`` may mean: itself from the root, else every file that ends with it."""
    if re.search(r"\*|<", name):
        parts = re.split(r"(\*|<[^>]+>)", name)
        body = "".join("[^/]*" if p == "*" else "[^/]+" if p.startswith("<") else re.escape(p) for p in parts)
        exact = [f for f in files if re.fullmatch(body, f)]
        return exact or [f for f in files if re.fullmatch(rf"(?:.*/)?{body}", f)]
    candidates = by_name.get(name.rsplit("/", 1)[-1], [])
    if name in candidates:
        return [name]
    return [f for f in candidates if f.endswith("/" + name)]


def stale_names(pages: dict[str, str], files: list[str]) -> list[str]:
    """``page:line: name (why)`` for each path a page names that no file, or more than one, answers."""
    by_name: dict[str, list[str]] = {}
    for f in files:
        by_name.setdefault(f.rsplit("/", 1)[-1], []).append(f)
    found = []
    for page, text in pages.items():
        for number, line in enumerate(text.splitlines(), 1):
            for name in PATH.findall(LINK_TARGET.sub("]", line)):
                if name in OTHERS:
                    continue
                hits = matching(name, files, by_name)
                wildcard = re.search(r"\*|<", name)
                if not hits:
                    found.append(f"{page}:{number}: {name} (no such file)")
                elif len(hits) > 1 and not wildcard:
                    found.append(f"{page}:{number}: {name} (ambiguous: {', '.join(sorted(hits))})")
    return found


def test_every_file_the_documentation_names_is_there():
    pages = {str(p.relative_to(ROOT)): p.read_text() for p in PAGES}
    stale = stale_names(pages, tree_files())
    assert not stale, "the documentation names files that are not there:\n" + "\n".join(stale)


def test_a_stale_or_ambiguous_name_is_given_with_its_page_and_line():
    files = ["tinytitan/engine/decode/step.py", "tinytitan/protocols/base.py", "tinytitan/engine/backends/base.py",
             "tests/test_spec_chat.py", "grammars/json.lark", "tools/README.md"]
    page = ("The step (`engine/decode/step.py`, `decode/step.py`, tests/test_spec_*.py, `grammars/*.lark`),\n"
            "once in `engine/step.py`, see [the tools](../tools/gone.md) and https://example.org/x/gone.py;\n"
            "`base.py` and `tinytitan/protocols/<name>.py`, `tools/README.md`, `OLD.py`, `DESIGN.md`.\n")
    assert stale_names({"docs/x.md": page}, files) == [
        "docs/x.md:2: engine/step.py (no such file)",
        "docs/x.md:3: base.py (ambiguous: tinytitan/engine/backends/base.py, tinytitan/protocols/base.py)",
        "docs/x.md:3: DESIGN.md (no such file)",
    ]
