"""Why the structured-output mask costs more in the engine than llguidance alone (not a test; run by hand).

    python tools/bench_mask_cold.py [--variant 50m] [--tokens 300] [--reps 6]

``bench_structured.py`` puts llguidance's own time at ~0.03 ms a token with nothing between two tokens, and the
mask's time through the engine at ~0.27 ms. This tool takes that gap apart, in process, on the MLX backend:

1. **What runs between two tokens.** The same answer's tokens (one constrained answer, sampled once) are
   replayed through a fresh matcher — compute the mask, consume the token — with one thing run before each
   call: nothing; a 1 ms sleep (the thread idles, no memory traffic); a 200 MB array summed on the same
   thread (every CPU cache flushed); the model's forward pass over one token (as the engine runs it, on mlx's
   own threads); the same pass with glibc's fastbins off (part 2). ms per token for each call.
2. **glibc's fastbins** (Linux with glibc only). Chunks that mlx's threads free while a pass runs wait in the
   model thread's malloc arena (its "fastbins") until a larger allocation consolidates them; llguidance's
   calls make that allocation. ``mallopt(M_MXFAST, 0)`` turns fastbins off for the whole process. The engine's
   lone plain request, lone constrained request (and its mask time, ``grammar_mask_s``) and a plain batch row
   beside another, with fastbins on (glibc's default, 128 bytes) and off, alternating in one process.

Every figure is a median over ``--reps`` repetitions, the two settings of part 2 in alternating order.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from tinytitan.blas import use_fast_blas  # noqa: E402

use_fast_blas()

from bench_common import ensure_model, machine_line, utc_now, wait_quiet  # noqa: E402
from bench_structured import TimedMask, batch_rate, decode_rate, engine_rate, schema  # noqa: E402

M_MXFAST = 1  # mallopt's parameter number (malloc.h)
GLIBC_MXFAST = 128  # glibc's default on 64-bit: 64 * sizeof(size_t) / 4


def answer_tokens(backend, prompt, tokens: int):
    """One constrained answer's tokens and its compiled grammar (the mask as a logits processor)."""
    from tinytitan.chat_request import Grammar
    from tinytitan.engine.structured import GrammarMask, compile_grammar

    compiled = compile_grammar(Grammar("json_schema", schema("kcold")), backend.tokenizer, backend.vocab_size)
    mask = GrammarMask(compiled)
    timed = TimedMask(mask)
    decode_rate(backend, prompt, tokens, [mask])
    return compiled, timed.tokens


def replay(compiled, tokens: list[int], between) -> tuple[float, float]:
    """ms per token to compute the mask and to consume the token, ``between()`` run before each call."""
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    fill = consume = 0.0
    for token in tokens:
        between()
        t0 = time.perf_counter()
        fill_next_token_bitmask(matcher, bitmask)
        fill += time.perf_counter() - t0
        between()
        t0 = time.perf_counter()
        matcher.consume_token(token)
        consume += time.perf_counter() - t0
    return fill / len(tokens) * 1000, consume / len(tokens) * 1000


def betweens(backend, prompt) -> dict:
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    kv = make_prompt_cache(backend.model)
    mx.eval(backend.model(mx.array([prompt]), cache=kv))
    big = np.ones((200 << 20) // 8)

    def forward():
        mx.eval(backend.model(mx.array([[prompt[-1]]]), cache=kv))
        for c in kv:
            c.trim(1)  # the cache stays as long: every pass costs the same

    return {"nothing": lambda: None, "a 1 ms sleep": lambda: time.sleep(0.001), "a 200 MB sum": big.sum,
            "a forward pass": forward}


def mallopt():
    """glibc's ``mallopt`` (None where the C library is not glibc)."""
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def fastbins_ab(backend, base, tokens: int, reps: int, set_max_fast) -> dict:
    out: dict = {}
    for rep in range(reps):
        wait_quiet(0.3)
        for max_fast in (GLIBC_MXFAST, 0) if rep % 2 == 0 else (0, GLIBC_MXFAST):
            set_max_fast(M_MXFAST, max_fast)
            nonce = "k" + uuid.uuid4().hex[:8]
            plain = engine_rate(backend, base, tokens, nonce, False)[0]
            json_rate, _, mask_ms = engine_rate(backend, base, tokens, nonce, True)
            row = batch_rate(backend, base, tokens, nonce, False)[0]
            for key, value in (("plain", plain), ("json", json_rate), ("mask", mask_ms), ("row", row)):
                out.setdefault((max_fast, key), []).append(value)
        print(f"rep {rep + 1}: " + ", ".join(f"{k[1]}@{k[0]} {v[-1]:.3f}" for k, v in sorted(out.items())),
              flush=True)
    set_max_fast(M_MXFAST, GLIBC_MXFAST)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="50m")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--reps", type=int, default=6)
    args = ap.parse_args()

    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.backends.mlx import MLXBackend

    backend = MLXBackend(ensure_model(args.variant), f"tinytitan-{args.variant}", prompt_cache_bytes=64 << 20)
    base = ChatRequest(model=backend.model_id, messages=(Message("user", "List the records as JSON."),),
                       max_tokens=4, temperature=0.0, reasoning=False)
    prompt = backend.prepare(base).tokens
    compiled, tokens = answer_tokens(backend, prompt, args.tokens)
    wait_quiet(0.3)
    set_max_fast = mallopt()
    runs: dict = {}
    for _ in range(args.reps):
        for name, between in betweens(backend, prompt).items():
            runs.setdefault(name, []).append(replay(compiled, tokens, between))
            if name == "a forward pass" and set_max_fast is not None:
                set_max_fast(M_MXFAST, 0)
                runs.setdefault(name + ", fastbins off", []).append(replay(compiled, tokens, between))
                set_max_fast(M_MXFAST, GLIBC_MXFAST)
    print()
    print(f"{utc_now()} · {machine_line()} · {args.variant} model, vocabulary {backend.vocab_size}, "
          f"{len(tokens)} tokens replayed, {args.reps} repetitions")
    print()
    print("| run before each llguidance call | compute the mask (ms) | consume the token (ms) |")
    print("| --- | --: | --: |")
    for name, got in runs.items():
        print(f"| {name} | {statistics.median(g[0] for g in got):.3f} | {statistics.median(g[1] for g in got):.3f} |")

    if set_max_fast is None:
        print("\n(no glibc mallopt here: the fastbins A/B is skipped)")
        return
    out = fastbins_ab(backend, base, args.tokens, args.reps, set_max_fast)
    print()
    print("| through the engine | fastbins on (glibc's default) | off (`M_MXFAST` 0) | off ÷ on |")
    print("| --- | --: | --: | --: |")
    for key, label in (("plain", "a lone plain request, tok/s"), ("json", "a lone constrained request, tok/s"),
                       ("mask", "its mask's own time per token (ms)"), ("row", "a plain batch row, tok/s")):
        on, off = statistics.median(out[(GLIBC_MXFAST, key)]), statistics.median(out[(0, key)])
        print(f"| {label} | {on:.3f} | {off:.3f} | {off / on:.3f} |")


if __name__ == "__main__":
    main()
