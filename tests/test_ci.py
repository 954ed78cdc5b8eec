"""CI tells the truth: a test whose install is missing skips on a developer's machine and fails under
``CI=true``; ``.ci/run`` pins the client versions the tests and recorded traces were written against."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parent.parent


def test_a_missing_install_skips_here_and_fails_under_ci(monkeypatch):
    monkeypatch.setattr(conftest, "CI", False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        conftest.absent("the thing is not installed")
    monkeypatch.setattr(conftest, "CI", True)
    with pytest.raises(pytest.fail.Exception, match="not installed .*CI=true"):
        conftest.absent("the thing is not installed")


# the skips that depend on the platform, not on an install (CI=true cannot install them): each named here
PLATFORM_SKIPS = {
    ("test_gguf.py", "mx.metal.is_available()"),  # with a GPU a GGUF always stays quantized
    ("test_large_bodies.py", "malloc_trim"),  # glibc only
    ("test_model_thread.py", "mallinfo2"),  # glibc 2.33 and later only
}
SKIP = re.compile(r"skipif\(|\bskip\(|importorskip\(|mark\.skip\b|\.xfail\(|mark\.xfail\b")


def test_no_test_skips_on_its_own_for_want_of_an_install():
    """Every test file, not a list: no test skips by itself (``skipif`` / ``pytest.skip`` / ``importorskip`` /
    ``xfail``) but the platform skips named above. A test that needs an install goes through ``needs`` /
    ``absent`` / ``imported`` (conftest.py), so CI=true turns its skip into a failure."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name in ("conftest.py", "test_ci.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SKIP.search(line) and not any(path.name == f and mark in line for f, mark in PLATFORM_SKIPS):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "skips that CI=true would not turn into failures:\n" + "\n".join(found)


def test_the_guard_sees_a_skip():
    """The scan above would catch each way of skipping (it is not a list of files that happen to be clean)."""
    for line in ('pytestmark = pytest.mark.skipif(X is None, reason="x")', 'pytest.skip("no x")',
                 'x = pytest.importorskip("x")', "@pytest.mark.skip", 'pytest.xfail("x")'):
        assert SKIP.search(line), line


# ``needs`` itself, or a mark made with it in a harness module (claude_harness.needs_claude,
# browser_harness.in_a_browser)
NEEDS = re.compile(r"\bneeds\(|\bneeds_claude\b|@in_a_browser\b")


def test_the_tests_that_need_an_install_say_so_by_mark():
    """The end-to-end and real-model tests declare what they need (``needs``)."""
    for name in ("test_e2e_claude.py", "test_e2e_codex.py", "test_e2e_memory.py", "test_e2e_real_model.py",
                 "test_real_model.py", "test_dashboard.py", "test_gguf_kquant_real.py"):
        assert NEEDS.search((ROOT / "tests" / name).read_text()), name


def test_ci_pins_the_client_versions_the_traces_were_recorded_with():
    run = (ROOT / ".ci" / "run").read_text()
    traces = (ROOT / "tests" / "traces" / "README.md").read_text()
    claude = re.search(r'TINYTITAN_CLAUDE_CODE_VERSION:-([0-9.]+)\}', run).group(1)
    codex = re.search(r'TINYTITAN_CODEX_VERSION:-([0-9.]+)\}', run).group(1)
    assert f"Claude Code {claude}" in traces and f"Codex CLI {codex}" in traces
    assert "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" in run and "@openai/codex@$CODEX_VERSION" in run
    assert 'export CI="${CI:-true}"' in run
