"""The documentation holds: the site builds in strict mode (a broken link or anchor fails), the README's links
lead somewhere, the README stays a front page, and every flag the help shows is documented under the group
the help puts it in (docs/cli.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "docs" / "cli.md"

try:
    import material  # noqa: F401  (the theme: the docs extra)
    import mkdocs  # noqa: F401
    HAVE_MKDOCS = True
except ImportError:
    HAVE_MKDOCS = False


@needs(not HAVE_MKDOCS, "MkDocs is not installed: pip install -e '.[docs]'")
def test_the_site_builds_in_strict_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "agents" / "claude-code" / "index.html").exists()


def test_the_readme_is_a_front_page_whose_links_lead_somewhere():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "    pip install -e '.[test]' && python -m pytest -q\n" in text  # .ci/run runs this very line
    assert "    pip install . && tinytitan serve\n" in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+://", target):
            assert (ROOT / target).exists(), f"README links to {target}, which is not there"


def test_every_page_of_the_docs_is_in_the_site():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        assert str(page.relative_to(ROOT / "docs")) in nav, f"{page} is in no nav entry of mkdocs.yml"


def help_groups(argv: list[str]) -> dict[str, list[str]]:
    """The help's groups (their titles up to any parenthesis) and the long flags listed in each."""
    text = subprocess.run([sys.executable, "-m", "tinytitan", *argv, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line) and not line.startswith("usage"):
            current = line[:-1].split(" (")[0].strip()
            groups[current] = []
        elif current is not None:
            m = re.match(r"^  (?:-\w, )?(--[\w-]+)", line)
            if m and m.group(1) != "--help":
                groups[current].append(m.group(1))
    return {k: v for k, v in groups.items() if v}


def doc_sections(command: str) -> dict[str, str]:
    """docs/cli.md's ``### group`` sections under ``## tinytitan <command>``."""
    text = CLI.read_text()
    part = text.split(f"\n## tinytitan {command}\n", 1)[1].split("\n## ", 1)[0]
    sections = {}
    for chunk in re.split(r"\n### ", part)[1:]:
        title, _, body = chunk.partition("\n")
        sections[title.strip()] = body
    return sections


@pytest.mark.parametrize("command", ["serve", "launch"])
def test_every_flag_in_the_help_is_documented_in_the_group_the_help_gives_it(command):
    groups = help_groups([command])
    sections = doc_sections(command)
    assert groups, "the help lists no flags"
    undocumented = []
    for group, flags in groups.items():
        if group == "options":  # argparse's own group: nothing should be left there
            assert not flags, f"`tinytitan {command} --help` lists {flags} outside any group"
            continue
        assert group in sections, f"docs/cli.md has no '### {group}' under '## tinytitan {command}'"
        undocumented += [f"{f} ({group})" for f in flags if f"`{f}" not in sections[group]]
    assert not undocumented, f"flags of `tinytitan {command} --help` missing from docs/cli.md: {undocumented}"


def test_every_command_and_the_other_commands_flags_are_documented():
    text = CLI.read_text()
    top = subprocess.run([sys.executable, "-m", "tinytitan", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    commands = re.search(r"\{([\w,-]+)\}", top).group(1).split(",")
    for command in commands:
        assert f"## tinytitan {command}" in text, command
    for command in ("memory", "demo-model"):
        for flags in help_groups([command]).values():
            for flag in flags:
                assert f"`{flag}" in text, f"tinytitan {command} {flag} is not in docs/cli.md"


CHROMIUM = __import__("os").environ.get("TINYTITAN_CHROMIUM", "/usr/bin/chromium")
try:
    import playwright  # noqa: F401
    NO_BROWSER = None if Path(CHROMIUM).exists() else f"no chromium at {CHROMIUM} (.ci/run installs Debian's chromium)"
except ImportError:
    NO_BROWSER = "the playwright package is not installed (.ci/run installs it)"


@needs(NO_BROWSER is not None, NO_BROWSER or "")
def test_the_dashboard_screenshot_is_made_by_a_command(tmp_path):
    """docs/dashboard.png comes from tools/dashboard_screenshot.py (a server, a short session, headless
    chromium), never from a hand: the command must keep working."""
    out = tmp_path / "dashboard.png"
    done = subprocess.run([sys.executable, "tools/dashboard_screenshot.py", "--out", str(out), "--chromium", CHROMIUM],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert "![the dashboard](dashboard.png)" in (ROOT / "docs" / "operating.md").read_text()
