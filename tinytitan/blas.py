"""A fast BLAS for mlx on Linux, found and loaded without the user setting anything.

The ``mlx[cpu]`` wheels bundle a reference BLAS: fp32 matrix products run at a few GFLOP/s. Loading a
system OpenBLAS (Debian: ``libopenblas0-pthread``) into the global symbol scope *before* mlx is imported
makes mlx's ``cblas_*`` calls resolve to it: about 30× faster matmuls, which is most of prompt processing.
Where none is installed the bundled one is used, and the startup log says so and how to get a fast one.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("tinytitan.blas")

CANDIDATES = ("libopenblas.so.0", "libopenblasp.so.0", "libopenblas64_.so.0", "libopenblas.so", "libblis.so.4",
              "libmkl_rt.so.2", "libmkl_rt.so")
BUNDLED = "mlx's bundled reference BLAS (slow: install OpenBLAS, e.g. apt install libopenblas0-pthread)"

_chosen: str | None = None


def _describe(lib: ctypes.CDLL, name: str) -> str:
    try:
        fn = lib.openblas_get_config
        fn.restype = ctypes.c_char_p
        return f"OpenBLAS ({fn().decode().strip()}; {name})"
    except AttributeError:
        return name


def use_fast_blas(candidates: tuple[str, ...] = CANDIDATES) -> str:
    """Load the first fast BLAS found (once); return what mlx will run its matrix products on."""
    global _chosen
    if _chosen is not None:
        return _chosen
    if not sys.platform.startswith("linux"):
        _chosen = "Accelerate / Metal (macOS)"
        return _chosen
    if "mlx.core" in sys.modules:
        _chosen = "whatever mlx bound at import (mlx was imported before tinytitan.blas could choose)"
        return _chosen
    for name in candidates:
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        if not hasattr(lib, "cblas_sgemm"):
            continue
        _chosen = _describe(lib, name)
        return _chosen
    _chosen = BUNDLED
    return _chosen
