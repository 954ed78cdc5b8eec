"""Interactive Claude Code end to end: the real ``claude`` in a tmux window against ``tinytitan serve --script``
behind the recording proxy (claude_harness.tinytitan), prompts typed into it as a user types them.

Skipped when ``claude`` or ``tmux`` is not on PATH (``npm install -g @anthropic-ai/claude-code@2.1.337``,
``apt install tmux``).
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from conftest import needs
from claude_harness import CLAUDE, model_requests, needs_claude, read_record, request_lines, tinytitan
from tmux_harness import TMUX, tmux, wait_for_screen


pytestmark = [
    pytest.mark.clients,
    needs_claude,
]


@needs(TMUX is None, reason="tmux is not installed (apt install tmux): interactive Claude Code runs in a tmux window")
def test_an_interactive_session_is_refused_safeguards_once_and_reuses_the_cache(tmp_path):
    """Interactive Claude Code (auto mode, its default) sends ``safeguards`` with its first request: refused by
    name, once per session; it resends without it. Three turns typed into it: each answered, every turn after the
    first a cache hit."""
    answers = ["First answer here.", "Second answer here.", "Third answer here."]
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / ".claude.json").write_text(json.dumps({  # no dialog waits: onboarding done, the key and folder trusted
        "hasCompletedOnboarding": True, "lastOnboardingVersion": "2.1.337", "theme": "dark",
        "customApiKeyResponses": {"approved": ["x"], "rejected": []},
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}}))
    session = f"tt-{uuid.uuid4().hex[:8]}"
    banner: list = []
    with tinytitan(answers, tmp_path, banner=banner) as (base, model, record):
        server = banner.pop()
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "ANTHROPIC_BASE_URL": base,
               "ANTHROPIC_API_KEY": "x", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "CLAUDE_CODE_MAX_RETRIES": "1"}
        command = "env -i " + " ".join(f"{k}={v}" for k, v in env.items()) + f" {CLAUDE} --model {model}"
        tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", "-c", str(work), command, check=True)
        try:
            for k, prompt in enumerate(["say hi", "and again", "once more"]):
                screen = wait_for_screen(session, "❯", 60)  # the input prompt
                tmux("send-keys", "-t", session, "-l", prompt, check=True)
                time.sleep(0.5)
                tmux("send-keys", "-t", session, "Enter", check=True)
                screen = wait_for_screen(session, answers[k], 60)
        finally:
            tmux("kill-session", "-t", session, capture_output=True)
        log = "".join(server.lines)
    assert answers[2] in screen
    reqs = model_requests(read_record(record))
    assert ["safeguards" in r["body"] for r in reqs] == [True, False, False, False], [sorted(r["body"]) for r in reqs]
    assert reqs[0]["body"]["safeguards"][0]["type"] == "dangerous_tool_use"
    lines = request_lines(log)
    assert [line["status"] for line in lines] == [400, 200, 200, 200], lines
    assert lines[0]["param"] == "safeguards"
    assert [line["cache"] for line in lines[2:]] == ["hit", "hit"], lines


