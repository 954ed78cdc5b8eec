"""glibc's ``malloc_trim``: giving the C heap's free pages back to the system; ``mallinfo2``: how much it holds free.

The server asks for a trim after a request with a large body (http/trim.py) and once the model thread is idle
after a job that left much of the heap free (engine/model_thread.py). Where the C library has neither (macOS,
musl) there is nothing to call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Callable


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
    """The bytes glibc's heap holds free (``mallinfo2().fordblks``, every arena: what a trim could give back),
    or None where the C library has no ``mallinfo2`` (glibc before 2.33, macOS, musl)."""
    fn = _libc("mallinfo2", [], _Mallinfo2)
    return None if fn is None else lambda: int(fn().fordblks)
