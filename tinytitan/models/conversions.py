"""The converted GGUF models on disk (``<cache>/gguf/<name>-<digest>-v<version>-<form>``, gguf.py), bounded.

A conversion is large (a float32 copy is 4–8× its GGUF), so:

Rules:
- Each use of a conversion (found or just written) marks it recently used (the directory's modification time).
- A conversion written by another converter version can never be used again (the version is part of its key):
  it is removed at the next use of any conversion.
- Past ``max_bytes`` (``--conversions-mib``), the least recently used conversions are removed until the rest
  fit, with a log line naming each. A conversion this process has used is never removed by it (a catalog's
  models stay servable), so one larger than the budget is still kept, with a warning.
- A conversion cut short (a ``.<name>.….tmp`` directory) is left alone: another process may be writing it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path

log = logging.getLogger("tinytitan.gguf")

DEFAULT_MIB = 32 * 1024
_NAME = re.compile(r"^(?!\.).+-v(\d+)-(quantized|float16|float32)$")

_lock = threading.Lock()
_max_bytes = DEFAULT_MIB << 20
_in_use: set[Path] = set()


def configure(max_bytes: int) -> None:
    """The budget for all conversions together (``--conversions-mib``)."""
    global _max_bytes
    _max_bytes = max(int(max_bytes), 0)


def _size(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def used(target: Path, version: int) -> None:
    """``target`` is being served: mark it recently used, remove stale versions, and keep the rest in budget."""
    target = Path(target)
    now = time.time()
    try:
        os.utime(target, (now, now))
    except OSError:
        pass
    with _lock:
        _in_use.add(target.resolve())
        keep = set(_in_use)
        budget = _max_bytes
    entries = []
    for d in target.parent.iterdir():
        m = _NAME.match(d.name)
        if m is None or not d.is_dir() or d.is_symlink():
            continue
        if int(m.group(1)) != version:
            _remove(d, f"converted by an earlier converter (v{m.group(1)}; now v{version})")
            continue
        try:
            entries.append((d.stat().st_mtime, d))
        except OSError:
            continue
    sized = [(mtime, d, _size(d)) for mtime, d in entries]
    total = sum(size for _, _, size in sized)
    for _, d, size in sorted(sized, key=lambda e: e[0]):
        if total <= budget:
            break
        if d.resolve() in keep:
            continue
        if _remove(d, f"least recently used, {size / 2**20:.0f} MiB: the conversions are over their budget of "
                      f"{budget >> 20} MiB (--conversions-mib)"):
            total -= size
    if total > budget:
        log.warning("the converted models in use take %.0f MiB, over the %d MiB budget (--conversions-mib): kept, "
                    "as they are being served", total / 2**20, budget >> 20)


def _remove(d: Path, why: str) -> bool:
    log.info("removing the converted model %s: %s", d, why)
    try:
        # renamed first, so a process looking for it never sees half a directory (it converts again)
        doomed = d.with_name(f".{d.name}.{os.getpid()}.removed.tmp")
        os.replace(d, doomed)
    except OSError as exc:
        log.warning("could not remove %s: %s", d, exc)
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True
