"""glibc's ``malloc_trim``: giving the C heap's free pages back to the system.

The server asks for a trim after a request with a large body (http/trim.py), and ``IdleTrim`` decides whether
one is worth it once the model thread is idle after a job (engine/model_thread.py). Where the C library has no
``malloc_trim`` (macOS, musl) there is nothing to call.

Rules of ``IdleTrim``:
- It trims where the heap holds at least ``TRIM_ABOVE`` free (glibc's ``mallinfo2``: every arena) and the
  process's resident memory grew by at least as much since the last trim (or since it was lowest): what a long
  prompt leaves (205 MiB free after 8,000 tokens on a 48M-parameter model; GBs after an agent's 30k).
- Not after an ordinary request (5–20 MiB free): the next request would fault those pages in again, which cost
  a lone request's time to first token 5–8 %. Not again while nothing was faulted in since: the free bytes
  still count the holes a trim gave back (they stay free in the allocator), so they alone would trim every time.
- Where the free or resident bytes cannot be read, every call trims.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Callable

TRIM_ABOVE = 64 << 20  # bytes (see the rules)


def _libc(name: str, argtypes: list, restype) -> Callable | None:
    """The C library's function ``name`` (its types set), or None off Linux or where the library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return fn


def glibc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    fn = _libc("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    return None if fn is None else lambda: fn(0)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def glibc_free_bytes() -> Callable[[], int] | None:
    """The bytes glibc's heap holds free (``mallinfo2().fordblks``, every arena; holes a trim gave back count
    too), or None where the C library has no ``mallinfo2`` (glibc before 2.33, macOS, musl)."""
    fn = _libc("mallinfo2", [], _Mallinfo2)
    return None if fn is None else lambda: int(fn().fordblks)


def resident_bytes() -> Callable[[], int] | None:
    """The process's resident memory (``/proc/self/statm``), or None where there is no such file."""
    if not os.path.exists("/proc/self/statm"):
        return None
    page = os.sysconf("SC_PAGE_SIZE")

    def read() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page
    return read


class IdleTrim:
    """Called when the model thread is idle after a job: trims the heap where that is worth it (see the rules)."""

    def __init__(self, trim: Callable[[], object] | None = None, free_bytes: Callable[[], int] | None = None,
                 resident: Callable[[], int] | None = None, above: int = TRIM_ABOVE):
        self.trim = trim or glibc_trim()
        self.free_bytes = free_bytes or glibc_free_bytes()
        self.resident = resident or resident_bytes()
        self.above = above
        self.floor: int | None = None  # resident bytes after the last trim, or the lowest seen since

    def __call__(self) -> bool:
        """Trim if worth it; whether it did."""
        if self.trim is None:
            return False
        if self.free_bytes is None or self.resident is None:
            self.trim()
            return True
        if self.floor is not None:  # trimmed before: only once as much was faulted in again
            now = self.resident()
            self.floor = min(self.floor, now)
            if now - self.floor < self.above:
                return False
        if self.free_bytes() < self.above:
            return False
        self.trim()
        self.floor = self.resident()
        return True
