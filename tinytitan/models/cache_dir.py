"""Where tinytitan keeps what it builds (converted models, the demo models, digests, launch's files)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$TINYTITAN_CACHE``, else ``$XDG_CACHE_HOME/tinytitan``, else ``~/.cache/tinytitan``."""
    if os.environ.get("TINYTITAN_CACHE"):
        return Path(os.environ["TINYTITAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tinytitan"
