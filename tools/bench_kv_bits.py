#!/usr/bin/env python3
"""KV memory with and without ``--kv-bits 8`` (mlx-lm's quantized KV cache) on the ~50M model.

1. **Tokens a 2048 MiB prompt cache holds**: in process, the model's KV cache after a prompt of ``--tokens``
   tokens (a multiple of mlx-lm's 256-token allocation step, so no padding is counted), its bytes per token,
   and 2048 MiB over that — with the plain cache and with the cache ``tinytitan serve --kv-bits 8`` makes.
2. **Decode tok/s**: ``tinytitan serve`` with and without ``--kv-bits 8`` (``--prompt-cache-dir off``), a
   streamed greedy answer of ``--max-tokens`` after a ``--prompt-words`` prompt (a fresh one each repetition,
   so no cached prefix serves it), the sides alternating; tokens after the first over the time after the first.
   Ratio: with ÷ without, median over the repetitions.

    python tools/bench_kv_bits.py                 # 50m, 4 repetitions, a few minutes on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ensure_model, fmt, machine_line, median, start_tinytitan, table, utc_now  # noqa: E402
from bench_http import post_stream  # noqa: E402

BUDGET_MIB = 2048


def bytes_per_token(model_dir: Path, tokens: int, kv_bits: int | None) -> float:
    from tinytitan.blas import use_fast_blas

    use_fast_blas()
    import mlx.core as mx

    from tinytitan.engine.backends.mlx import MLXBackend

    backend = MLXBackend(model_dir)
    backend.kv_bits = kv_bits
    backend.check_kv_bits()
    model = backend.ensure_loaded()
    kv = backend.new_cache(model)
    ids = mx.array([[(7 * i) % 1000 + 10 for i in range(tokens)]])
    for start in range(0, tokens, 512):
        model(ids[:, start:start + 512], cache=kv)
        mx.eval([c.state for c in kv])
    return sum(c.nbytes for c in kv) / tokens


def decode_rate(port: int, model: str, words: str, max_tokens: int) -> float:
    r = post_stream(port, "/v1/chat/completions", {"model": model, "stream": True, "temperature": 0,
                                                   "max_tokens": max_tokens, "stream_options": {"include_usage": True},
                                                   "messages": [{"role": "user", "content": words}]})
    if r.error:
        raise RuntimeError(r.error)
    n = (r.usage.get("completion_tokens") or 0) - 1
    return n / (r.t_last - r.t_first) if n > 0 and r.t_last and r.t_first else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="50m")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--prompt-words", type=int, default=600)
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args()
    print(f"bench_kv_bits {utc_now()} — {machine_line()}", flush=True)
    model_dir = ensure_model(args.model)
    per = {bits: bytes_per_token(model_dir, args.tokens, bits) for bits in (None, 8)}
    rates: dict = {None: [], 8: []}
    import random

    rng = random.Random(5)
    vocab = "the a parser token cache engine server client stream event request response model file test".split()
    with tempfile.TemporaryDirectory(prefix="tinytitan-bench-kv-") as logs:
        servers = {bits: start_tinytitan(model_dir, Path(logs), ["--prompt-cache-dir", "off"]
                                         + (["--kv-bits", str(bits)] if bits else [])) for bits in (None, 8)}
        try:
            for rep in range(args.reps):
                words = " ".join(rng.choice(vocab) for _ in range(args.prompt_words))
                for bits in ((None, 8) if rep % 2 == 0 else (8, None)):
                    s = servers[bits]
                    rates[bits].append(decode_rate(s.port, s.model_id, words, args.max_tokens))
                print(f"rep {rep}: decode tok/s plain {rates[None][-1]:.1f}, --kv-bits 8 {rates[8][-1]:.1f}", flush=True)
        finally:
            for s in servers.values():
                s.stop()
    rows = []
    for bits in (None, 8):
        rows.append(["--kv-bits 8" if bits else "plain", fmt(per[bits] / 1024, ".2f"),
                     f"{int(BUDGET_MIB * 2**20 / per[bits]):,}", fmt(median(rates[bits]), ".1f"),
                     fmt(median(a / b for a, b in zip(rates[bits], rates[None])))])
    print(f"\n### KV cache with and without --kv-bits 8 — {args.model} — {utc_now()} — {machine_line()}\n")
    print(table(["KV cache", "KiB per token", f"tokens in {BUDGET_MIB} MiB", "decode tok/s (median)",
                 "÷ plain (per repetition, median)"], rows, "lrrrr"))


if __name__ == "__main__":
    main()
