"""Decode speed of one model served by a group of 2 processes (``mlx.launch -n 2 --backend ring``, tensor
parallel, loopback) against one process, and the share of a decode step the lockstep plan's broadcast takes.

    python tools/bench_distributed.py                 # the ~50M model, about 2 minutes on 2 cores
    python tools/bench_distributed.py --model demo --reps 3 --max-tokens 128

Prints decode tok/s of each, their ratio (2 ranks / 1 rank), and, from rank 0's /health, the broadcast's
seconds over the steps' seconds during the measured requests. On one machine the two ranks share its cores
(and a loopback "network"), so the ratio documents the lockstep's overhead, not a speed-up: the speed-up is
for a model that does not fit one machine. Run it under ``flock /tmp/tinytitan-bench.lock``; other work on
the machine makes the figures noisy.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ROOT, ensure_model, free_port, machine_line  # noqa: E402


def start(cmd: list[str], port: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
        try:
            health(port)
            return proc
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the server did not come up")


def health(port: int) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/health")
    return json.loads(c.getresponse().read())


def decode_rate(port: int, model: str, max_tokens: int, prompt: str) -> float:
    """Tokens per second between the first streamed token and the last (one request, greedy)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
                       "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    first = last = None
    tokens = 0
    for line in r:
        if not line.startswith(b"data: {"):
            continue
        data = json.loads(line[6:])
        if data.get("usage"):
            tokens = data["usage"]["completion_tokens"]
        elif data.get("choices") and data["choices"][0]["delta"].get("content"):
            last = time.perf_counter()
            first = first or last
    return (tokens - 1) / (last - first)


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="50m", choices=["demo", "50m"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    path = ensure_model(args.model)
    launcher = shutil.which("mlx.launch")
    if launcher is None:
        raise SystemExit("mlx.launch is not on PATH (it comes with mlx)")
    serve = [sys.executable, "-m", "tinytitan", "serve", "--model", str(path), "--model-id", "m",
             "--responses-store", "memory"]
    prompts = [f"Write about topic number {i}, at length." for i in range(args.reps)]
    rates = {}
    share = None
    for ranks in (1, 2):
        port = free_port()
        cmd = serve + ["--port", str(port)]
        if ranks == 2:
            cmd = [launcher, "-n", "2", "--backend", "ring", "--", *cmd]
        proc = start(cmd, port)
        try:
            decode_rate(port, "m", 16, "Warm up.")
            before = health(port).get("group")
            rates[ranks] = sorted(decode_rate(port, "m", args.max_tokens, p) for p in prompts)[len(prompts) // 2]
            after = health(port).get("group")
            if after is not None:
                share = (after["plan_broadcast_s"] - before["plan_broadcast_s"]) / (after["step_s"] - before["step_s"])
                broadcasts = after["plan_broadcasts"] - before["plan_broadcasts"]
        finally:
            stop(proc)
    print(machine_line())
    print(f"model {args.model}, {args.max_tokens} tokens greedy, median of {args.reps}")
    print(f"1 rank : {rates[1]:7.1f} tok/s decode")
    print(f"2 ranks: {rates[2]:7.1f} tok/s decode (mlx.launch -n 2 --backend ring, tensor parallel, loopback)")
    print(f"2 ranks / 1 rank: {rates[2] / rates[1]:.2f}")
    print(f"plan broadcast: {share * 100:.1f} % of a decode step on rank 0 ({broadcasts} broadcasts)")


if __name__ == "__main__":
    main()
