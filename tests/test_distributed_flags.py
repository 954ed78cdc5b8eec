"""Ranks started with different --prompt-cache-mib: the group came up, served a first turn, then broke on a
conversation's second turn (rank 1's smaller cache no longer held the prefix rank 0 took), naming no flag. Every
rank now refuses at start, naming the rank and the flag."""

from __future__ import annotations

import time

import pytest

from group_harness import Group


def test_a_prompt_cache_budget_rank_1_does_not_share_is_refused_at_start_naming_it(tmp_path):
    g = Group(tmp_path, rank_args={1: ["--prompt-cache-mib", "0"]})
    try:
        with pytest.raises(AssertionError, match="exited"):
            g.wait()
        deadline = time.monotonic() + 60
        while any(p.poll() is None for p in g.procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        for r in range(2):
            assert g.procs[r].returncode not in (None, 0), r
            assert "rank 1 of the group was started with --prompt-cache-mib 0 (rank 0: 2048)" in \
                g.logs[r].read_text(), g.logs[r].read_text()[-2000:]
    finally:
        g.stop()
