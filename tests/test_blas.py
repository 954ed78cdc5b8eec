"""The fast-BLAS loader: it picks a system BLAS when there is one, and falls back cleanly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True).stdout.strip()


def test_falls_back_when_none_is_installed():
    out = run("from tinytitan.blas import use_fast_blas, BUNDLED; print(use_fast_blas(('libno-such-blas.so.9',)) == BUNDLED);"
              "import mlx.core as mx; print((mx.ones((4,4)) @ mx.ones((4,4))).sum().item())")
    assert out.splitlines() == ["True", "64.0"]


def test_uses_openblas_when_installed_and_results_are_right():
    import ctypes.util

    out = run("from tinytitan.blas import use_fast_blas; print(use_fast_blas());"
              "import mlx.core as mx, numpy as np; mx.random.seed(0); a = mx.random.normal((64, 32)); b = mx.random.normal((32, 16));"
              "print(np.allclose(np.array(a @ b), np.array(a) @ np.array(b), atol=1e-4))")
    chosen, correct = out.splitlines()
    assert correct == "True"
    if ctypes.util.find_library("openblas"):
        assert chosen.startswith("OpenBLAS"), chosen


def test_serve_logs_which_blas(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text('["ok"]')
    proc = subprocess.Popen([sys.executable, "-m", "tinytitan", "serve", "--script", str(script), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "is serving" in line:
                break
        assert any("matrix products run on:" in ln for ln in lines), "".join(lines)
    finally:
        proc.terminate()
        proc.wait(10)
