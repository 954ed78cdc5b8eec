"""Decode speed of one model served by a group of 2 processes (tensor parallel, ring backend on loopback)
against one process, and the share of a decode step the lockstep plan's broadcast takes. The group runs twice:
started by ``mlx.launch -n 2 --backend ring``, and its two ranks started as mlx.launch starts them (``MLX_RANK``
and a loopback ``MLX_HOSTFILE``) without the launcher, whose own process keeps a core busy polling the
ranks' pipes (on two cores that, not the lockstep, is most of the launched group's slowdown).

    python tools/bench_distributed.py                 # the ~50M model, about 2 minutes on 2 cores
    python tools/bench_distributed.py --model demo --reps 3 --max-tokens 128

Prints decode tok/s of each, their ratio (2 ranks / 1 rank), and, from rank 0's /health, the broadcast's
seconds over the steps' seconds during the measured requests; then, idle, the CPU seconds each process
spends in 5 s (the followers sleep between rank 0's heartbeats), and the first-token latency of a short
request sent after an idle pause (what the heartbeat's pause costs it: half of it on average). On one machine the two ranks share its cores
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
from bench_http import get_json  # noqa: E402


def start(cmds: list[tuple[list[str], dict]], port: int) -> list[subprocess.Popen]:
    """Each command (with its own environment added) in one new process group: the group's first process
    leads it, so one ``killpg`` stops them all and ``group_cpu`` finds them all."""
    procs: list[subprocess.Popen] = []
    for cmd, extra in cmds:
        env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", **extra)
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      process_group=procs[0].pid if procs else 0))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                stop(procs)
                raise SystemExit(f"{' '.join(proc.args)} exited with {proc.returncode}")
        try:
            health(port)
            return procs
        except OSError:
            time.sleep(0.5)
    stop(procs)
    raise SystemExit("the server did not come up")


def health(port: int) -> dict:
    return get_json(port, "/health", timeout=5)


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


def first_token_s(port: int, model: str) -> float:
    """Seconds from sending a short streamed request to its first token."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi."}], "temperature": 0,
                       "max_tokens": 2, "stream": True})
    started = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    for line in c.getresponse():
        if line.startswith(b"data: {") and b'"content":"' in line:
            return time.perf_counter() - started
    return time.perf_counter() - started


def group_cpu(pgid: int) -> dict[int, float]:
    """CPU seconds (user + system) so far of each process in process group ``pgid`` (a launcher and ranks)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def idle_cpu(procs: list[subprocess.Popen], seconds: float = 5.0) -> list[float]:
    time.sleep(1.0)
    before = group_cpu(procs[0].pid)
    time.sleep(seconds)
    after = group_cpu(procs[0].pid)
    return sorted((round(after[p] - before.get(p, 0.0), 2) for p in after), reverse=True)


def stop(procs: list[subprocess.Popen]) -> None:
    try:
        os.killpg(procs[0].pid, 15)
    except ProcessLookupError:
        pass
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ring(n: int) -> str:
    """A hostfile for ``n`` ranks on loopback, as ``mlx.launch -n N --backend ring`` writes one."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="tinytitan-ring-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump([[f"127.0.0.1:{free_port()}"] for _ in range(n)], f)
    return path


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
    hostfile = ring(2)
    sides = {  # a group started by mlx.launch, and its two ranks started as mlx.launch starts them (direct)
        "1 rank": lambda cmd: [(cmd, {})],
        "2 ranks, mlx.launch": lambda cmd: [([launcher, "-n", "2", "--backend", "ring", "--", *cmd], {})],
        "2 ranks, direct": lambda cmd: [(cmd, {"MLX_RANK": str(r), "MLX_HOSTFILE": hostfile}) for r in range(2)],
    }
    rates, idle, ttft, share = {}, {}, {}, {}
    for side, commands in sides.items():
        port = free_port()
        procs = start(commands(serve + ["--port", str(port)]), port)
        try:
            decode_rate(port, "m", 16, "Warm up.")
            before = health(port).get("group")
            rates[side] = sorted(decode_rate(port, "m", args.max_tokens, p) for p in prompts)[len(prompts) // 2]
            after = health(port).get("group")
            if after is not None:
                share[side] = ((after["plan_broadcast_s"] - before["plan_broadcast_s"])
                               / (after["step_s"] - before["step_s"]),
                               after["plan_broadcasts"] - before["plan_broadcasts"])
            idle[side] = idle_cpu(procs)
            pauses = []
            for _ in range(12):
                time.sleep(0.2)
                pauses.append(first_token_s(port, "m"))
            ttft[side] = sorted(pauses)[len(pauses) // 2]
        finally:
            stop(procs)
    os.unlink(hostfile)
    print(machine_line())
    print(f"model {args.model}, {args.max_tokens} tokens greedy, median of {args.reps}; tensor parallel, ring "
          "backend on loopback")
    one = rates["1 rank"]
    for side in sides:
        extra = "" if side not in share else (f"; plan broadcast {share[side][0] * 100:.1f} % of a decode step on "
                                              f"rank 0 ({share[side][1]} broadcasts)")
        print(f"{side:20s}: {rates[side]:7.1f} tok/s decode, {rates[side] / one:.2f} of 1 rank{extra}")
    for side in sides:
        print(f"{side:20s}: idle, CPU seconds in 5 s per process {idle[side]}; first token after an idle pause "
              f"(median of 12) {ttft[side] * 1e3:.1f} ms")
    print("(mlx.launch's own process polls its ranks' pipes in a loop: the first of its idle figures)")


if __name__ == "__main__":
    main()
