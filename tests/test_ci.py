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


def test_the_tests_that_need_an_install_say_so_by_mark():
    """No install-dependent test skips on its own (``skipif`` / ``pytest.skip`` / ``importorskip``): each goes
    through ``needs`` / ``absent``, so CI=true turns its skip into a failure."""
    for name in ("test_e2e_claude.py", "test_e2e_codex.py", "test_e2e_memory.py", "test_e2e_real_model.py",
                 "test_real_model.py", "test_dashboard.py"):
        text = (ROOT / "tests" / name).read_text()
        assert "needs(" in text, name
        assert not re.search(r"skipif\(|pytest\.skip\(|importorskip\(", text), name


def test_ci_pins_the_client_versions_the_traces_were_recorded_with():
    run = (ROOT / ".ci" / "run").read_text()
    traces = (ROOT / "tests" / "traces" / "README.md").read_text()
    claude = re.search(r'TINYTITAN_CLAUDE_CODE_VERSION:-([0-9.]+)\}', run).group(1)
    codex = re.search(r'TINYTITAN_CODEX_VERSION:-([0-9.]+)\}', run).group(1)
    assert f"Claude Code {claude}" in traces and f"Codex CLI {codex}" in traces
    assert f"@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" in run and "@openai/codex@$CODEX_VERSION" in run
    assert 'export CI="${CI:-true}"' in run
