#!/usr/bin/env python3
"""Concurrent streams: tinytitan serve vs mlx_lm.server on the same model, back to back.

For each model (the ~48M-parameter benchmark model by default) this measures, in one run:

- **aggregate decode tok/s** for 1, 2, 4 and 8 concurrent streams with distinct prompts (~400 tokens each,
  a different first word per stream and repetition, so no prompt cache serves them; greedy; ``--max-tokens``
  each): the streams' summed ``usage.completion_tokens`` ÷ (the last token of any stream − the first token of
  any stream); also over the whole answer (÷ the last token − the first request sent), which a first chunk sent
  earlier or later does not move. *Scaling* = aggregate(N) ÷ aggregate(1) of the same side in the same repetition.
- **TTFT under load**: a short request (~20 words, 8 tokens) sent once 3 long streams (``--long-tokens``
  each) have all produced their first token, ÷ the same side's TTFT for a short request on the idle server
  measured just before.

- **against mlx_lm.server**: each tinytitan side's aggregate ÷ the peer's, per stream count, the median of the
  per-repetition ratios (issue 31's target: ≥ 1.0 at 2, 4 and 8 streams); with ``--tinytitan-entry SCRIPT`` a
  side ``tinytitan*`` (that script run instead of ``python -m tinytitan``) is measured in the same run and
  also set against ``tinytitan``, to A/B a patched server.

Method as in bench_decode.py: both servers run at once (the one not measured idles); each repetition measures
every stream count on every side back to back, the order of the sides rotating; medians and the IQR of the
per-repetition figures. The servers start afresh each repetition, in an order that also rotates (the other
way): in A/A runs (the same server on both sides) the one started later measured 2-6 % faster, so servers
started once in a fixed order favoured the last-started side (mlx_lm.server) for the whole run. BLAS: tinytitan maps the system OpenBLAS itself, mlx_lm.server gets it by LD_PRELOAD;
the table says what each process mapped. Other processes share this CPU: each measurement records the cores
others used meanwhile (``others``), and the table reports the worst.

    python tools/bench_streams.py                    # 50m, 4 repetitions: about 6-10 minutes on 2 cores
    python tools/bench_streams.py --models demo,50m --reps 6 --sequential --json out.json
    python tools/bench_streams.py --reps 3 --prompt-lookup off --no-peer --tinytitan-entry patched.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (CpuWatch, blas_of, ensure_model, fmt, machine_line, median,  # noqa: E402
                          start_mlx_lm_server, start_tinytitan, table, utc_now, wait_quiet)
from bench_http import post_stream  # noqa: E402
from bench_decode import chat_body, iqr, prompt_text  # noqa: E402

COUNTS = (1, 2, 4, 8)
TARGETS = {"scale4": 1.9, "ttft_load": 2.0,  # issue 9: 4 streams ÷ 1 ≥ 1.9; loaded TTFT ÷ idle ≤ 2
           "vs_peer": 1.0}  # issue 31: 2/4/8 streams ≥ mlx_lm.server's aggregate


def streams(server, nonces: list[int], words: int, max_tokens: int) -> dict:
    """N streams at once; aggregate decode tok/s over the window from the first token to the last."""
    def one(nonce):
        return post_stream(server.port, "/v1/chat/completions",
                           chat_body(server.model_id, prompt_text(nonce, words), max_tokens))

    with ThreadPoolExecutor(len(nonces)) as pool:
        results = list(pool.map(one, nonces))
    bad = [r.error or "no output" for r in results if r.error or r.t_first is None]
    if bad:
        raise RuntimeError(f"{server.name}: {bad[0]}")
    tokens = sum(r.usage.get("completion_tokens") or 0 for r in results)
    window = max(r.t_last for r in results) - min(r.t_first for r in results)
    whole = max(r.t_last for r in results) - min(r.t_send for r in results)
    return {"tokens": tokens, "agg": tokens / window if window > 0 else None, "whole": tokens / whole,
            "last_ttft": max(r.ttft for r in results)}


def ttft_under_load(server, nonces, words: int, long_tokens: int) -> dict:
    """A short request's TTFT on the idle server, then while 3 long streams decode."""
    short = lambda n: chat_body(server.model_id, prompt_text(n, 20), 8)  # noqa: E731
    idle = post_stream(server.port, "/v1/chat/completions", short(next(nonces)))
    firsts = [threading.Event() for _ in range(3)]
    long_nonces = [next(nonces) for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        longs = [pool.submit(post_stream, server.port, "/v1/chat/completions",
                             chat_body(server.model_id, prompt_text(n, words), long_tokens), None, 600, ev)
                 for n, ev in zip(long_nonces, firsts)]
        for ev in firsts:
            ev.wait(300)
        loaded = post_stream(server.port, "/v1/chat/completions", short(next(nonces)))
        still = sum(1 for f in longs if not f.done())
        for f in longs:
            f.result()
    return {"idle": idle.ttft, "loaded": loaded.ttft, "ratio": loaded.ttft / idle.ttft,
            "longs_running": still}


def bench_model(variant: str, args, log_dir: Path) -> dict:
    model_dir = ensure_model(variant, args.cache_dir)
    print(f"\n== {variant}: {model_dir} ({args.max_tokens} tokens a stream, prompts ~{args.words} words) ==",
          flush=True)
    lookup = ["--prompt-lookup", args.prompt_lookup]
    starters = {"tinytitan": lambda: start_tinytitan(model_dir, log_dir, extra=lookup)}
    if args.sequential:
        starters["tinytitan --max-batch 1"] = lambda: start_tinytitan(model_dir, log_dir,
                                                                      extra=["--max-batch", "1", *lookup])
    if args.tinytitan_entry:  # an A/B side: the same server started from a patched entry script
        starters["tinytitan*"] = lambda: start_tinytitan(model_dir, log_dir, extra=lookup, entry=args.tinytitan_entry)
    if not args.no_peer:
        starters["mlx_lm.server"] = lambda: start_mlx_lm_server(model_dir, log_dir, blas=args.peer_blas)
    sides = list(starters)
    results = {side: [] for side in sides}
    blas: dict = {}
    nonces = itertools.count(1000)
    servers: dict = {}
    try:
        for rep in range(args.reps):
            # the servers start afresh each repetition unless --start-once, in an order that rotates: in A/A runs a
            # server started later measured a few % faster than the same server started earlier, so a fixed
            # order favours one side for the whole run. The measuring order rotates the other way.
            if rep == 0 or not args.start_once:
                for s in servers.values():
                    s.stop()
                servers = {}
                for side in sides[rep % len(sides):] + sides[:rep % len(sides)]:
                    servers[side] = starters[side]()
                    servers[side].name = side
                pids = [s.pid for s in servers.values()]
                for s in servers.values():  # warm-up
                    streams(s, [next(nonces) for _ in range(2)], args.words, 8)
            if not blas:
                blas = {name: blas_of(servers[name].pid) for name in sides}
                for k, v in blas.items():
                    print(f"  {k:24s} BLAS: {v}", flush=True)
            back = sides[::-1]
            for side in back[rep % len(sides):] + back[:rep % len(sides)]:
                s = servers[side]
                m = {}
                for n in COUNTS:
                    wait_quiet(args.max_foreign, max_wait=args.quiet_wait, pids=pids)
                    with CpuWatch(pids) as w:
                        m[n] = streams(s, [next(nonces) for _ in range(n)], args.words, args.max_tokens)
                    m[n]["others"] = w.foreign
                wait_quiet(args.max_foreign, max_wait=args.quiet_wait, pids=pids)
                with CpuWatch(pids) as w:
                    m["load"] = ttft_under_load(s, nonces, args.words, args.long_tokens)
                m["load"]["others"] = w.foreign
                results[side].append(m)
                print(f"  rep {rep + 1} {side:24s} " + "  ".join(f"{n}: {fmt(m[n]['agg'], '.1f')}" for n in COUNTS)
                      + f" tok/s; short TTFT idle {m['load']['idle'] * 1000:.0f} ms, under load "
                        f"{m['load']['loaded'] * 1000:.0f} ms", flush=True)
        return {"variant": variant, "max_tokens": args.max_tokens, "blas": blas, "results": results}
    finally:
        for s in servers.values():
            s.stop()


def against(runs: list[dict], key: str = "agg") -> list[list[str]]:
    """Each tinytitan side ÷ mlx_lm.server (and ``tinytitan*`` ÷ ``tinytitan``), per stream count: the median of
    the per-repetition ratios (every side runs in every repetition, back to back) of ``key`` (``agg``, or
    ``whole``: the tokens over the time from the first request sent to the last token)."""
    rows = []
    for run in runs:
        res = run["results"]
        pairs = [(side, "mlx_lm.server") for side in res if side != "mlx_lm.server" and "mlx_lm.server" in res]
        if "tinytitan*" in res:
            pairs.append(("tinytitan*", "tinytitan"))
        for side, base in pairs:
            ratios = {n: [a[n][key] / b[n][key] for a, b in zip(res[side], res[base])
                          if a[n].get(key) and b[n].get(key)] for n in COUNTS}
            cells = [f"{fmt(median(ratios[n]), '.2f')} ({iqr(ratios[n]) or '—'})" for n in COUNTS]
            target = TARGETS["vs_peer"]
            verdict = (f"2/4/8 ≥ {target}: " + ", ".join(
                "met" if ratios[n] and median(ratios[n]) >= target else "MISSED" for n in (2, 4, 8))
                if base == "mlx_lm.server" and side == "tinytitan" and key == "agg" else "")
            rows.append([run["variant"], f"{side} ÷ {base}", *cells, verdict])
    return rows


def summarise(runs: list[dict]) -> str:
    rows, ratio_rows, vs, whole = [], [], against(runs), against(runs, "whole")
    for run in runs:
        for side, reps in run["results"].items():
            aggs = {n: [r[n]["agg"] for r in reps if r[n]["agg"]] for n in COUNTS}
            scale = {n: [r[n]["agg"] / r[1]["agg"] for r in reps if r[n]["agg"] and r[1]["agg"]] for n in COUNTS}
            loads = [r["load"]["ratio"] for r in reps]
            others = max(max(r[n]["others"] for n in COUNTS) for r in reps)
            rows.append([run["variant"], side, run["blas"].get(side, "?")]
                        + [fmt(median(aggs[n]), ".1f") for n in COUNTS]
                        + [fmt(median(r[8]["last_ttft"] * 1000 for r in reps), ".0f"), f"{others:.2f}"])
            verdict = []
            if side == "tinytitan":
                verdict.append(f"4÷1 ≥ {TARGETS['scale4']}: {'met' if median(scale[4]) >= TARGETS['scale4'] else 'MISSED'}")
                verdict.append(f"8 ≥ 4: {'met' if median(aggs[8]) >= median(aggs[4]) else 'MISSED'}")
                verdict.append(f"TTFT ≤ {TARGETS['ttft_load']}×: "
                               f"{'met' if median(loads) <= TARGETS['ttft_load'] else 'MISSED'}")
            ratio_rows.append([run["variant"], side]
                              + [f"{fmt(median(scale[n]), '.2f')} ({iqr(scale[n]) or '—'})" for n in (2, 4, 8)]
                              + [f"{fmt(median(loads), '.2f')} ({iqr(loads) or '—'})",
                                 fmt(median(r["load"]["idle"] * 1000 for r in reps), ".0f"),
                                 fmt(median(r["load"]["loaded"] * 1000 for r in reps), ".0f"),
                                 "; ".join(verdict) or ("(peer)" if side == "mlx_lm.server" else "")])
    return "\n".join([
        "Aggregate decode tok/s (medians), N concurrent streams:", "",
        table(["model", "side", "BLAS", "1", "2", "4", "8", "8: last TTFT ms", "others (cores, worst)"], rows,
              "lllrrrrrr"),
        "", "Scaling (aggregate ÷ 1 stream, same side and repetition; median (IQR)) and a short request's TTFT "
        "while 3 long streams decode:", "",
        table(["model", "side", "2÷1", "4÷1", "8÷1", "TTFT loaded÷idle", "idle ms", "loaded ms", "targets (issue 9)"],
              ratio_rows, "llllllrrl")]
        + (["", "Aggregate against the other side (median of per-repetition ratios (IQR)):", "",
            table(["model", "ratio", "1", "2", "4", "8", "target (issue 31)"], vs, "lllllll"),
            "", "The same over the whole answer (tokens ÷ the time from the first request sent to the last token: "
            "no earlier or later first chunk moves it):", "",
            table(["model", "ratio", "1", "2", "4", "8", ""], whole, "lllllll")] if vs else []))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="50m", help="comma-separated variants: demo, 50m (default 50m)")
    p.add_argument("--reps", type=int, default=4, help="repetitions (default 4)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens each stream decodes (default 64)")
    p.add_argument("--long-tokens", type=int, default=256, help="tokens each long stream decodes (default 256)")
    p.add_argument("--words", type=int, default=300, help="prompt length in words (default 300: ~400 tokens)")
    p.add_argument("--sequential", action="store_true", help="add a side: tinytitan with --max-batch 1")
    p.add_argument("--prompt-lookup", choices=["on", "off"], default="on",
                   help="tinytitan serve's --prompt-lookup (default on, as shipped; off: the decode step alone, without drafting — what raw mlx-lm and mlx_lm.server do)")
    p.add_argument("--cache-dir", help="where to build the models (default: tinytitan's cache dir)")
    p.add_argument("--peer-blas", choices=["openblas", "bundled"], default="openblas")
    p.add_argument("--max-foreign", type=float, default=0.3, help="wait for others to use fewer cores than this")
    p.add_argument("--quiet-wait", type=float, default=10.0, help="seconds to wait for a quiet CPU at most")
    p.add_argument("--no-peer", action="store_true", help="skip mlx_lm.server")
    p.add_argument("--tinytitan-entry", metavar="SCRIPT",
                   help="add a side 'tinytitan*': this script run instead of `python -m tinytitan` (same arguments), "
                        "to A/B a patched server in the same run")
    p.add_argument("--start-once", action="store_true",
                   help="start each server once for the whole run (faster; by default they restart every repetition, "
                        "in a rotating order)")
    p.add_argument("--json", help="write the raw measurements here")
    args = p.parse_args()
    started = time.monotonic()
    print(f"bench_streams {utc_now()} — {machine_line()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tinytitan-bench-") as logs:
        runs = [bench_model(v.strip(), args, Path(logs)) for v in args.models.split(",") if v.strip()]
    print(f"\n### Concurrent streams — {utc_now()} — {machine_line()}\n")
    print(summarise(runs))
    print(f"\n(total {time.monotonic() - started:.0f}s)")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
