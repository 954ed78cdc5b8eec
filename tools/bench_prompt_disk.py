#!/usr/bin/env python3
"""The prompt cache on disk: the first turn after a restart, against a warm in-memory hit and a cold prompt.

A Claude Code-shaped request (/v1/messages: billing line, 3 system blocks, tools, a long stable prefix of
``--prefix-sentences`` sentences, about 8.5k tokens by default) on ``tinytitan serve`` with
``--prompt-cache-dir`` a fresh directory. Per repetition (a new prefix each time, so nothing earlier serves it):

1. **cold**: the prefix and a first user turn — nothing cached;
2. **warm**: the same prefix and another user turn — the prefix is a hit in memory;
3. the server is stopped once its disk writes are done (``/health`` says so) and started again on the same
   directory;
4. **after restart**: the same prefix and a third user turn — the prefix is read back from disk.

It prints TTFT of each, and per repetition the ratios restart ÷ warm and restart ÷ cold (medians over the
repetitions). Targets (issue 22): restart ÷ warm ≤ 1.5 and restart ÷ cold ≤ 0.2 on the ~50M model with a
≥ 8k-token prefix. The file is read back from the page cache (the machine just wrote it): what a restart
on the same machine sees.

    python tools/bench_prompt_disk.py                     # 50m, 3 repetitions, a few minutes on 2 cores
    python tools/bench_prompt_disk.py --models demo --reps 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ensure_model, fmt, machine_line, median, start_tinytitan, table, utc_now  # noqa: E402
from bench_http import post_stream  # noqa: E402
from bench_session_turns import ANTHROPIC_HEADERS, CC_TOOLS, Text  # noqa: E402

RESTART_VS_WARM, RESTART_VS_COLD = 1.5, 0.2


def body(model: str, prefix: str, user: str, max_tokens: int) -> dict:
    return {"model": model, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3.abc; cc_entrypoint=cli; "
                                                "cch=0f1e2;"},
                       {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                        "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}}],
            "tools": CC_TOOLS, "messages": [{"role": "user", "content": user}],
            "metadata": {"user_id": "user_bench_account__session_0"}}


def health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        return json.loads(r.read())


def disk_settled(port: int, writes: int, timeout: float = 120.0) -> dict:
    """Wait until the server has written ``writes`` prefixes and has none left to write."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        cache = next(iter(health(port).get("prompt_cache", {}).values()), {})
        if cache.get("disk_writes", 0) >= writes and not cache.get("disk_pending"):
            return cache
        time.sleep(0.2)
    raise RuntimeError("the server did not finish its disk writes in time")


def one(model_dir: Path, log_dir: Path, cache_dir: Path, prefix: str, max_tokens: int, rep: int) -> dict:
    extra = ["--prompt-cache-dir", str(cache_dir)]
    tt = start_tinytitan(model_dir, log_dir, extra)
    try:
        path = "/v1/messages?beta=true"
        cold = post_stream(tt.port, path, body(tt.model_id, prefix, f"First question, round {rep}.", max_tokens),
                           ANTHROPIC_HEADERS)
        warm = post_stream(tt.port, path, body(tt.model_id, prefix, f"Second question, round {rep}.", max_tokens),
                           ANTHROPIC_HEADERS)
        disk = disk_settled(tt.port, 2)
    finally:
        tt.stop()
    tt = start_tinytitan(model_dir, log_dir, extra)
    try:
        again = post_stream(tt.port, path, body(tt.model_id, prefix, f"Third question, round {rep}.", max_tokens),
                            ANTHROPIC_HEADERS)
        with urllib.request.urlopen(f"http://127.0.0.1:{tt.port}/profile", timeout=10) as r:
            steps = (json.loads(r.read()).get("data") or [{}])[-1]
        print("  after restart, where the time went: " + ", ".join(
            f"{k[:-2]} {v * 1000:.0f} ms" for k, v in steps.items() if k.endswith("_s") and k != "total_s" and v), flush=True)
    finally:
        tt.stop()
    for name, r in (("cold", cold), ("warm", warm), ("restart", again)):
        if r.error:
            raise RuntimeError(f"{name}: {r.error}")

    def cached(r):
        return r.usage.get("cache_read_input_tokens") or 0

    def prompt(r):
        return (r.usage.get("input_tokens") or 0) + cached(r)

    return {"prompt": prompt(cold), "cold": cold.ttft, "warm": warm.ttft, "restart": again.ttft,
            "cached_warm": cached(warm), "cached_restart": cached(again), "disk_mib": disk["disk_bytes"] / 2**20,
            "restart_vs_warm": again.ttft / warm.ttft, "restart_vs_cold": again.ttft / cold.ttft}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="50m", help="comma-separated: demo, 50m (default 50m)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--prefix-sentences", type=int, default=640,
                   help="sentences of stable system prompt (default 640: about 8.5k tokens with the tools)")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--cache-dir", help="where to build the models (default: tinytitan's cache dir)")
    args = p.parse_args()
    print(f"bench_prompt_disk {utc_now()} — {machine_line()}", flush=True)
    summary = []
    with tempfile.TemporaryDirectory(prefix="tinytitan-bench-disk-") as tmp:
        for variant in [v.strip() for v in args.models.split(",") if v.strip()]:
            model_dir = ensure_model(variant, args.cache_dir)
            rows = []
            for rep in range(args.reps):
                prefix = ("You are an interactive CLI tool that helps users with software engineering tasks. "
                          + Text(1000 + rep).sentences(args.prefix_sentences))
                r = one(model_dir, Path(tmp), Path(tmp) / f"cache-{variant}-{rep}", prefix, args.max_tokens, rep)
                rows.append(r)
                print(f"{variant} rep {rep}: prompt {r['prompt']} tok, TTFT cold {r['cold'] * 1000:.0f} ms, warm "
                      f"{r['warm'] * 1000:.0f} ms (cached {r['cached_warm']}), after restart "
                      f"{r['restart'] * 1000:.0f} ms (cached {r['cached_restart']}), on disk {r['disk_mib']:.0f} MiB",
                      flush=True)
            rw = median(r["restart_vs_warm"] for r in rows)
            rc = median(r["restart_vs_cold"] for r in rows)
            summary.append([variant, len(rows), median(r["prompt"] for r in rows),
                            fmt(median(r["cold"] for r in rows) * 1000, ".0f"),
                            fmt(median(r["warm"] for r in rows) * 1000, ".0f"),
                            fmt(median(r["restart"] for r in rows) * 1000, ".0f"),
                            fmt(min(r["cached_restart"] / r["prompt"] for r in rows)),
                            fmt(rw), fmt(rc),
                            "met" if rw <= RESTART_VS_WARM and rc <= RESTART_VS_COLD else "MISSED"])
    print(f"\n### Prompt cache on disk: first turn after a restart — {utc_now()} — {machine_line()}\n")
    print(table(["model", "reps", "prompt tok", "TTFT cold ms", "TTFT warm ms", "TTFT after restart ms",
                 "worst cached÷prompt after restart", "restart÷warm", "restart÷cold",
                 f"target ≤ {RESTART_VS_WARM} / ≤ {RESTART_VS_COLD}"], summary, "lrrrrrrrrl"))


if __name__ == "__main__":
    main()
