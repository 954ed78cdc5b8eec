"""The shipped spec files, read and compiled once per test session.

A protocol instance belongs to one server (it is attached to that server's services), but the spec it is
built from is immutable, and reading the YAML was nearly all of a test server's start (about 100 ms on an
idle machine, several times that under load). ``install()`` memoizes ``load_protocol`` for the shipped
specs; a test with its own spec directory (or a spec file path) still reads its files afresh.
"""

from __future__ import annotations

from functools import lru_cache

import tinytitan.protocols.base as base

_read = base.load_protocol


@lru_cache(maxsize=None)
def _shipped(name: str):
    return _read(name)


def _load_protocol(name_or_path, directory=None):
    if directory is None and isinstance(name_or_path, str) and not name_or_path.endswith(".yaml"):
        return _shipped(name_or_path)
    return _read(name_or_path, directory)


def install() -> None:
    base.load_protocol = _load_protocol
