"""glibc's ``malloc_trim``: giving the C heap's free pages back to the system.

The server asks for it after a request with a large body (http/trim.py) and once the model thread is idle
after a job (engine/model_thread.py). Where the C library has none (macOS, musl) there is nothing to call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Callable


def glibc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: fn(0)
