#!/usr/bin/env python3
"""The batched decode step in one process: tinytitan's scheduler beside a bare mlx-lm ``BatchGenerator`` loop.

bench_streams.py measures two servers over HTTP, which on a shared 2-core machine is noisy and mixes the step
with everything around it (HTTP, SSE, the protocol machines). This measures only the model thread, in one
process, alternating the two sides run by run so both see the same machine minute:

- **raw**: what mlx_lm.server's generation thread does per step, roughly: ``BatchGenerator.insert`` every
  prompt, then ``next()`` until every row has its tokens, each token through the row's detokenizer.
- **tinytitan**: the same N prompts (the same chat template, greedy, ``--max-tokens`` each) as rows of
  ``decoder.Scheduler`` (the one decode step: plan → forward → fold, with the rows' DecodeLoops, parsers and
  stop handling), stepped until every row has ended; events go to a list.

For each side and N it prints the aggregate tok/s over the window from the first token to the last (as
bench_streams.py counts it), the median decode-step ms once every row decodes, and tinytitan ÷ raw. With
``--profile`` it runs tinytitan once more under cProfile and prints where its step spends the time.

    python tools/bench_step.py                       # 50m, N = 2 4 8, 3 rounds: about 1-2 minutes
    python tools/bench_step.py --counts 8 --rounds 5 --profile
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, CpuWatch, ensure_model, machine_line, utc_now  # noqa: E402
from bench_decode import prompt_text  # noqa: E402


def requests(backend, nonces, words: int, max_tokens: int):
    from tinytitan.chat_request import ChatRequest, Message

    return [backend.prepare(ChatRequest(model=backend.model_id, messages=(Message("user", prompt_text(n, words)),),
                                        max_tokens=max_tokens, temperature=0)) for n in nonces]


def run_raw(backend, prepared: list, max_tokens: int, arrivals: list[float]) -> dict:
    """mlx_lm.server's loop, roughly: the prompts that have arrived are inserted, then ``next()``; each token
    through its row's detokenizer; until every row has its tokens."""
    from mlx_lm.generate import BatchGenerator

    tok = backend.tokenizer
    gen = BatchGenerator(backend.model, completion_batch_size=32, prefill_batch_size=8, prefill_step_size=2048)
    detoks, waiting = {}, list(zip(arrivals, prepared))
    counted, first, steps, eos, firsts = 0, None, [], tok.eos_token_ids, {}
    start = time.perf_counter()
    while waiting or detoks:
        now = time.perf_counter() - start
        due = [p for at, p in waiting if at <= now]
        waiting = [(at, p) for at, p in waiting if at > now]
        if due:
            for uid in gen.insert([p.tokens for p in due], max_tokens=[max_tokens] * len(due)):
                detoks[uid] = tok.detokenizer
                detoks[uid].reset()
        if not detoks:
            time.sleep(max(0.0, waiting[0][0] - now))
            continue
        t0 = time.perf_counter()
        _, responses = gen.next()
        ended = []
        for r in responses:
            d = detoks[r.uid]
            if r.token in eos:
                d.finalize()
            else:
                d.add_token(r.token)
                counted += 1
                if r.finish_reason is not None:
                    d.finalize()
            _ = d.last_segment
            if r.finish_reason is not None or r.token in eos:
                ended.append(r)
        t1 = time.perf_counter()
        for r in responses:
            firsts.setdefault(r.uid, t1)
        if responses:
            first = first if first is not None else t1
            if len(responses) == len(prepared):
                steps.append(t1 - t0)
        for r in ended:
            del detoks[r.uid]
        if any(r.finish_reason is None for r in ended):  # an end-of-turn token the generator did not stop at
            gen.remove([r.uid for r in ended if r.finish_reason is None])
    last = time.perf_counter()
    gen.close()
    return {"tokens": counted, "window": last - first, "steps": steps, "lag": max(firsts.values()) - first}


def run_tinytitan(backend, prepared: list, max_batch: int, arrivals: list[float], phases: dict | None = None) -> dict:
    """The same prompts as rows of the decoder's Scheduler, taken in between steps as they arrive (as
    ``Decoder._run`` does), stepped until each has ended."""
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.decode.scheduler import FIRST_CHUNK, Scheduler
    from tinytitan.engine.decode.rows import Row

    events: list = []
    scheduler = Scheduler(lambda b: None, max_batch, FIRST_CHUNK, seeded=True)
    rows = []
    for p in prepared:
        loop = DecodeLoop(backend.parser(p), p.req.stop, events.append, p.sampling)
        rows.append(Row(backend, p, loop=loop, should_stop=lambda: False))
    waiting = list(zip(arrivals, rows))
    first, steps = None, []
    start = time.perf_counter()
    try:
        while waiting or scheduler.rows:
            now = time.perf_counter() - start
            for at, row in [w for w in waiting if w[0] <= now]:
                scheduler.admit(row)
            waiting = [w for w in waiting if w[0] > now]
            if not scheduler.rows:
                time.sleep(max(0.0, waiting[0][0] - now))
                continue
            decoding = sum(1 for r in scheduler.rows.values() if r.generated) == len(rows)
            t0 = time.perf_counter()
            if phases is None:
                scheduler.step(lambda: False)
            else:
                plan = scheduler.plan(lambda: False)
                t1 = time.perf_counter()
                out = scheduler.forward.run(plan, scheduler.rows)
                t2 = time.perf_counter()
                scheduler.fold(plan, out)
                t3 = time.perf_counter()
                if decoding:
                    for k, v in (("plan", t1 - t0), ("forward", t2 - t1), ("fold", t3 - t2)):
                        phases.setdefault(k, []).append(v)
            t_end = time.perf_counter()
            if first is None and any(r.generated for r in rows):
                first = t_end
            if decoding:
                steps.append(t_end - t0)
    finally:
        scheduler.close()
    last = time.perf_counter()
    tokens = sum(r.decoded for r in rows)
    lag = max(r.loop.first_token_at for r in rows) - min(r.loop.first_token_at for r in rows)
    return {"tokens": tokens, "window": last - first, "steps": steps, "lag": lag}


def fmt_ms(xs) -> str:
    return f"{statistics.median(xs) * 1000:.2f}" if xs else "—"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="50m", help="demo model variant (default 50m)")
    p.add_argument("--counts", default="2,4,8", help="rows at once (default 2,4,8)")
    p.add_argument("--rounds", type=int, default=3, help="alternations of the two sides per count (default 3)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens each row decodes (default 64)")
    p.add_argument("--words", type=int, default=300, help="prompt length in words (default 300: ~400 tokens)")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--spread", type=float, default=0.0,
                   help="ms from the first row's arrival to the last one's, evenly spaced (default 0: all at once)")
    p.add_argument("--profile", action="store_true", help="then profile tinytitan's steps (largest count)")
    p.add_argument("--prompt-lookup", choices=["on", "off"], default="on",
                   help="tinytitan's rows draft by prompt lookup (default on, as served; off: the step alone, "
                        "as the bare BatchGenerator loop decodes)")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from tinytitan.blas import use_fast_blas

    blas = use_fast_blas()
    import logging

    logging.basicConfig(level=logging.WARNING)
    from tinytitan.engine.backends.mlx import MLXBackend

    model_dir = ensure_model(args.model)
    from tinytitan.engine.speculative.speculator import SpeculativeConfig

    backend = MLXBackend(model_dir, speculative=SpeculativeConfig(lookup=args.prompt_lookup == "on"))
    print(f"bench_step {utc_now()} — {machine_line()} — {blas}\n{args.model}: {model_dir}, {args.max_tokens} tokens "
          f"a row, prompts ~{args.words} words", flush=True)
    counts = [int(c) for c in args.counts.split(",")]
    nonce = 5000
    warm = requests(backend, [1, 2], args.words, 8)
    run_raw(backend, warm, 8, [0, 0])
    run_tinytitan(backend, warm, args.max_batch, [0, 0])
    results = {n: {"raw": [], "tinytitan": []} for n in counts}
    for rnd in range(args.rounds):
        for n in counts:
            sides = ["raw", "tinytitan"] if rnd % 2 == 0 else ["tinytitan", "raw"]
            for side in sides:
                prepared = requests(backend, range(nonce, nonce + n), args.words, args.max_tokens)
                nonce += n
                arrivals = [i * args.spread / 1000 / max(n - 1, 1) for i in range(n)]
                with CpuWatch() as w:
                    r = (run_raw(backend, prepared, args.max_tokens, arrivals) if side == "raw"
                         else run_tinytitan(backend, prepared, args.max_batch, arrivals))
                r["others"] = w.foreign
                results[n][side].append(r)
            raw, tt = results[n]["raw"][-1], results[n]["tinytitan"][-1]
            print(f"  round {rnd + 1} N={n}: raw {raw['tokens'] / raw['window']:.1f} tok/s step "
                  f"{fmt_ms(raw['steps'])} ms lag {raw['lag'] * 1000:.0f} ms | tinytitan "
                  f"{tt['tokens'] / tt['window']:.1f} tok/s step {fmt_ms(tt['steps'])} ms lag {tt['lag'] * 1000:.0f} ms"
                  f" | others {max(raw['others'], tt['others']):.2f} cores", flush=True)
    print(f"\n### In-process batched step — {utc_now()} — {machine_line()}\n")
    print("| N | raw tok/s | tinytitan tok/s | tok/s ratio | raw step ms | tinytitan step ms | step ratio (raw÷tt) "
          "| first-token lag ms (raw, tinytitan) | others (cores, worst) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        agg = {s: statistics.median(r["tokens"] / r["window"] for r in results[n][s]) for s in ("raw", "tinytitan")}
        step = {s: statistics.median(x for r in results[n][s] for x in r["steps"]) for s in ("raw", "tinytitan")}
        others = max(r["others"] for s in ("raw", "tinytitan") for r in results[n][s])
        lag = {s: statistics.median(r["lag"] for r in results[n][s]) * 1000 for s in ("raw", "tinytitan")}
        print(f"| {n} | {agg['raw']:.1f} | {agg['tinytitan']:.1f} | {agg['tinytitan'] / agg['raw']:.2f} | "
              f"{step['raw'] * 1000:.2f} | {step['tinytitan'] * 1000:.2f} | {step['raw'] / step['tinytitan']:.2f} | "
              f"{lag['raw']:.0f}, {lag['tinytitan']:.0f} | {others:.2f} |")
    if args.profile:
        import cProfile
        import pstats

        n = max(counts)
        phases: dict = {}
        prepared = requests(backend, range(nonce, nonce + n), args.words, args.max_tokens)
        arrivals = [i * args.spread / 1000 / max(n - 1, 1) for i in range(n)]
        run_tinytitan(backend, prepared, args.max_batch, arrivals, phases)
        print("\nphases of a decode step (median ms): "
              + ", ".join(f"{k} {fmt_ms(v)}" for k, v in phases.items()))
        prepared = requests(backend, range(nonce + n, nonce + 2 * n), args.words, args.max_tokens)
        prof = cProfile.Profile()
        prof.enable()
        run_tinytitan(backend, prepared, args.max_batch, arrivals)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
