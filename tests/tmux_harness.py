"""An interactive client driven in a tmux window as a user drives it: tmux commands bounded by TMUX_TIMEOUT (a
tmux that stops answering fails the test, it does not hang it), and a wait for the window to show a text.
TMUX: the installed tmux, or None."""

from __future__ import annotations

import shutil
import subprocess
import time


TMUX = shutil.which("tmux")
TMUX_TIMEOUT = 30  # seconds for one tmux command: a tmux that stops answering fails the test, it does not hang it


def tmux(*args: str, **run) -> subprocess.CompletedProcess:
    """``tmux ARGS`` (``run``: subprocess.run's options), bounded by TMUX_TIMEOUT."""
    try:
        return subprocess.run([TMUX, *args], timeout=TMUX_TIMEOUT, **run)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"tmux {args[0]} did not answer within {TMUX_TIMEOUT}s") from None


def wait_for_screen(session: str, text: str, timeout: float) -> str:
    """The tmux window's text once it shows ``text``."""
    deadline = time.monotonic() + timeout
    while True:
        screen = tmux("capture-pane", "-p", "-t", session, capture_output=True, text=True).stdout
        if text in screen:
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"the window never showed {text!r}:\n{screen}")
        time.sleep(0.1)
