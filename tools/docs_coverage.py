"""Is every block of a Markdown file somewhere in the documentation? For moving text out of README.md into
docs/ without losing any: each paragraph, list item, table row and code line of OLD must appear in README.md or
a page under docs/ (whitespace, line wrapping and link targets aside: a link may point elsewhere once moved).

    python tools/docs_coverage.py OLD.md            # e.g. git show main:README.md > /tmp/old.md
    git show main:README.md | python tools/docs_coverage.py -

Prints each block it cannot find, with its line in OLD, and exits 1 if there is one; headings are not
checked (pages rename them). Exit 0: nothing was lost.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def normalise(text: str) -> str:
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets change when text moves between pages
    text = re.sub(r"^\s*[-*]\s+", "", text)  # a list item may become a paragraph, or the reverse
    text = text.replace("|", " ")  # a table row may gain or lose a column's padding
    return re.sub(r"\s+", " ", text).strip()


def blocks(text: str) -> list[tuple[int, str]]:
    """(line, text) of each paragraph, list item (with its continuation lines), table row and code line."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    fence = False

    def flush():
        if current:
            out.append((start, " ".join(current)))
            current.clear()

    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            fence = not fence
            continue
        if fence or line.startswith("    ") and not current:  # code: line by line
            flush()
            if stripped:
                out.append((n, stripped))
            continue
        if not stripped or stripped.startswith("#") or re.fullmatch(r"\|?[\s:|-]+\|?", stripped):
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            out.append((n, stripped))
            continue
        if re.match(r"\s*[-*]\s+|\s*\d+\.\s+", line):
            flush()
        if not current:
            start = n
        current.append(stripped)
    flush()
    return out


def corpus(root: Path) -> str:
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return normalise("\n".join(p.read_text() for p in pages if p.exists()))


def missing(old: str, root: Path = ROOT) -> list[tuple[int, str]]:
    have = corpus(root)
    return [(n, b) for n, b in blocks(old) if normalise(b) and normalise(b) not in have]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the Markdown file whose text must not be lost ('-': standard input)")
    args = ap.parse_args()
    old = sys.stdin.read() if args.old == "-" else Path(args.old).read_text()
    lost = missing(old)
    for n, b in lost:
        print(f"line {n}: {b[:160]}")
    total = len(blocks(old))
    print(f"{total - len(lost)} of {total} blocks found in README.md and docs/")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
