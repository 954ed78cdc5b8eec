"""The "memory on" line is the server's: it says once, at start, where memory lives; ``tinytitan memory …``
prints what was asked for and nothing about a memory being switched on."""

from __future__ import annotations

import logging

from tinytitan.cli import main
from tinytitan.flags import build_parser
from tinytitan.serve import open_memory


def on_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory on:")]


def test_the_server_says_memory_is_on_once(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    args = build_parser().parse_args(["serve", "--memory", "--memory-dir", str(tmp_path)])
    memory = open_memory(args)
    try:
        assert on_lines(caplog) == [f"memory on: {memory.db.where} (tools full, 4 rounds per request)"]
    finally:
        memory.close()


def test_the_memory_command_does_not(tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO)
    assert main(["memory", "--memory-dir", str(tmp_path), "--user", "me", "projects"]) == 0
    assert on_lines(caplog) == [] and "no memory for" in capsys.readouterr().out
