"""fp32 matrix products on mlx's CPU stream: the bundled reference BLAS against the system BLAS that
``tinytitan serve`` loads (``tinytitan.blas.use_fast_blas``), each in a fresh process (the BLAS must be chosen
before mlx is imported). Prints GFLOP/s for each and their ratio, the figure the README's "Linux CPU speed"
line quotes.

    python tools/bench_blas.py [--n 1024] [--reps 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
fast = sys.argv[1] == "fast"
blas = "mlx's bundled BLAS"
if fast:
    from tinytitan.blas import use_fast_blas
    blas = use_fast_blas()
import mlx.core as mx
n, reps = int(sys.argv[2]), int(sys.argv[3])
a = mx.random.normal((n, n), dtype=mx.float32, stream=mx.cpu)
b = mx.random.normal((n, n), dtype=mx.float32, stream=mx.cpu)
mx.eval(a, b)
mx.eval(mx.matmul(a, b, stream=mx.cpu))  # warm-up
rates = []
for _ in range(reps):
    t0 = time.perf_counter()
    mx.eval(mx.matmul(a, b, stream=mx.cpu))
    rates.append(2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
print(json.dumps({"blas": blas, "gflops": rates}))
"""


def run(kind: str, n: int, reps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", WORKER, kind, str(n), str(reps)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1024, help="square matrix size (default 1024)")
    p.add_argument("--reps", type=int, default=9, help="timed products per BLAS (default 9)")
    args = p.parse_args()
    bundled, fast = run("bundled", args.n, max(1, args.reps // 3)), run("fast", args.n, args.reps)
    slow_rate, fast_rate = statistics.median(bundled["gflops"]), statistics.median(fast["gflops"])
    print(f"{args.n}x{args.n} fp32 matmul, median GFLOP/s")
    print(f"  {bundled['blas']}: {slow_rate:.1f}")
    print(f"  {fast['blas']}: {fast_rate:.1f}")
    print(f"  ratio: {fast_rate / slow_rate:.1f}x")


if __name__ == "__main__":
    main()
