"""Why the structured-output mask costs more in the engine than llguidance alone (not a test; run by hand).

    python tools/bench_mask_cold.py [--variant 50m] [--tokens 300] [--reps 6]
    python tools/bench_mask_cold.py --engine-only --max-fast 128,64,32,16,0   # part 2 alone, more sizes

``bench_structured.py`` puts llguidance's own time at ~0.03 ms a token with nothing between two tokens, and the
mask's time through the engine at ~0.27 ms. This tool takes that gap apart, in process, on the MLX backend:

1. **What runs between two tokens.** The same answer's tokens (one constrained answer, sampled once) are
   replayed through a fresh matcher in the engine's order — consume the sampled token, compute the next mask —
   with one thing run before each token: nothing; a 1 ms sleep (the thread idles, no memory traffic); a 200 MB
   array summed on the same thread (the data caches flushed); the model's forward pass over one token (on
   mlx's own threads, as in the engine, though not overlapped with the calls); the same pass with glibc's
   fastbins off (part 2); the same pass with the two calls on a thread of their own, which glibc normally gives a
   malloc arena of its own (the handoff there and back in a third column). ms per token for each of the two calls;
   their sum is what ``grammar_mask_s`` counts for a sampled token, less the handoff to mlx.
2. **glibc's fastbins** (Linux with glibc only). What part 1 shows is consistent with this (not profiled):
   chunks that mlx's threads free while a pass runs wait in the model thread's malloc arena (its "fastbins")
   until a larger allocation consolidates them, and llguidance's calls make that allocation.
   ``mallopt(M_MXFAST, 0)`` turns fastbins off for the whole process. The engine's lone plain request, lone
   constrained request (and its mask time, ``grammar_mask_s``) and a plain batch row beside another, with
   fastbins on (glibc's default: 128 bytes on 64-bit) and off, alternating in one process; ``--max-fast``
   names other sizes (the order rotating each repetition; ratios against the first size).

Every figure is a median over ``--reps`` repetitions, on and off in alternating order; a ratio is the median
of the per-repetition ratios.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import platform
import queue
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from tinytitan.blas import use_fast_blas  # noqa: E402

use_fast_blas()

from bench_common import machine_line, utc_now, wait_quiet  # noqa: E402
from bench_structured import TimedMask, batch_rate, decode_rate, engine_rate, iqr, schema, setup  # noqa: E402

M_MXFAST = 1  # mallopt's parameter number (malloc.h)
FORWARD = "the model's forward pass over one token"
ON_THREAD = "the same pass, the two calls on a thread of their own"
GLIBC_MXFAST = 64 * ctypes.sizeof(ctypes.c_size_t) // 4  # glibc's default (a glibc.malloc.mxfast tunable is not read)


def answer_tokens(backend, prompt, tokens: int):
    """One constrained answer (the mask as a logits processor): its compiled grammar and its tokens."""
    from tinytitan.chat_request import Grammar
    from tinytitan.engine.structured import GrammarMask, compile_grammar

    compiled = compile_grammar(Grammar("json_schema", schema("kcold")), backend.tokenizer, backend.vocab_size)
    mask = GrammarMask(compiled)
    timed = TimedMask(mask)
    decode_rate(backend, prompt, tokens, [mask])
    return compiled, timed.tokens


class GrammarCalls:
    """A fresh matcher over ``compiled``, its prompt's mask computed (on the thread that makes it): ``one(token)``
    makes the two calls a sampled token costs, in the engine's order (consume it, then compute the next mask)."""

    def __init__(self, compiled):
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        self.fill = fill_next_token_bitmask
        self.matcher = compiled.matcher()
        self.bitmask = allocate_token_bitmask(1, compiled.vocab_size)
        self.fill(self.matcher, self.bitmask)

    def one(self, token: int) -> tuple[bool, float, float]:
        """→ (the token was in the grammar, seconds to consume it, seconds to compute the next mask)."""
        t0 = time.perf_counter()
        ok = self.matcher.consume_token(token)
        t1 = time.perf_counter()
        self.fill(self.matcher, self.bitmask)
        t2 = time.perf_counter()
        return ok and not self.matcher.is_error(), t1 - t0, t2 - t1

    def left(self) -> RuntimeError:
        return RuntimeError(f"the replayed answer left its grammar: {self.matcher.get_error()}")


def replay(compiled, tokens: list[int], between) -> tuple[float, float]:
    """ms per token to consume the token and to compute the next mask, ``between()`` run before each token
    (the engine's order: the pass, then the sampled token consumed, then the next mask)."""
    calls = GrammarCalls(compiled)
    fill = consume = 0.0
    for token in tokens:
        between()
        ok, consumed, filled = calls.one(token)
        consume, fill = consume + consumed, fill + filled
        if not ok:
            raise calls.left()
    return consume / len(tokens) * 1000, fill / len(tokens) * 1000


def replay_on_thread(compiled, tokens: list[int], between) -> tuple[float, float, float]:
    """``replay`` with the two calls on a thread of their own (glibc normally gives a new thread a malloc
    arena of its own, up to 8 arenas a core), the calling thread waiting for them: ms per token to consume, to
    compute the next mask, and for the handoff there and back (the calling thread's wait less the two calls)."""
    asks, answers = queue.SimpleQueue(), queue.SimpleQueue()

    def work() -> None:
        try:
            calls = GrammarCalls(compiled)  # (made there: its memory is that thread's arena's)
            answers.put(calls)
            while (token := asks.get()) is not None:
                answers.put(calls.one(token))
        except BaseException as exc:  # the waiting thread raises it, rather than wait for good
            answers.put(exc)

    def answer():
        got = answers.get()
        if isinstance(got, BaseException):
            raise got
        return got

    worker = threading.Thread(target=work, name="grammar calls")
    worker.start()
    calls = answer()
    waited = fill = consume = 0.0
    try:
        for token in tokens:
            between()
            t0 = time.perf_counter()
            asks.put(token)
            ok, consumed, filled = answer()
            waited += time.perf_counter() - t0
            consume, fill = consume + consumed, fill + filled
            if not ok:
                raise calls.left()
    finally:
        asks.put(None)
        worker.join()
    per = 1000 / len(tokens)
    return consume * per, fill * per, (waited - consume - fill) * per


def betweens(backend, prompt) -> dict:
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

    kv = make_prompt_cache(backend.model)
    mx.eval(backend.model(mx.array([prompt]), cache=kv))
    big = np.ones((200 << 20) // 8)
    trim = can_trim_prompt_cache(kv)

    def forward():
        mx.eval(backend.model(mx.array([[prompt[-1]]]), cache=kv))
        if trim:
            trim_prompt_cache(kv, 1)  # the cache stays as long: every pass costs the same

    return {"nothing": lambda: None, "a 1 ms sleep": lambda: time.sleep(0.001),
            "a 200 MB sum on the same thread (the data caches flushed)": big.sum,
            FORWARD: forward}


def mallopt():
    """Sets glibc's fastbin size (``mallopt(M_MXFAST, n)``, checked); None where the C library is not glibc."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int

    def set_max_fast(size: int) -> None:
        if fn(M_MXFAST, size) != 1:
            raise OSError(f"mallopt(M_MXFAST, {size}) refused")

    return set_max_fast


def on_off(rep: int) -> tuple[int, int]:
    """The fastbin sizes to run in repetition ``rep``: on then off, or off then on (alternating)."""
    return (GLIBC_MXFAST, 0) if rep % 2 == 0 else (0, GLIBC_MXFAST)


def nonce() -> str:
    return "k" + uuid.uuid4().hex[:8]  # a prompt new to the prompt cache


def rotated(sizes: list[int], rep: int) -> list[int]:
    """The fastbin sizes in repetition ``rep``: each repetition starts one further along."""
    k = rep % len(sizes)
    return sizes[k:] + sizes[:k]


def fastbins_ab(backend, base, tokens: int, reps: int, set_max_fast, sizes: list[int]) -> dict:
    out: dict = {}
    for rep in range(reps):
        wait_quiet(0.3)
        for max_fast in rotated(sizes, rep):  # (two sizes: on then off, or off then on, as ``on_off``)
            set_max_fast(max_fast)
            plain = engine_rate(backend, base, tokens, nonce(), False)[0]
            json_rate, _, mask_ms = engine_rate(backend, base, tokens, nonce(), True)
            row = batch_rate(backend, base, tokens, nonce(), False)[0]
            for key, value in (("plain", plain), ("json", json_rate), ("mask", mask_ms), ("row", row)):
                out.setdefault((max_fast, key), []).append(value)
        print(f"rep {rep + 1}: " + ", ".join(f"{k[1]}@{k[0]} {v[-1]:.3f}" for k, v in sorted(out.items())),
              flush=True)
    set_max_fast(GLIBC_MXFAST)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="50m")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--max-fast", default=f"{GLIBC_MXFAST},0",
                    help="the fastbin sizes (bytes) the engine A/B runs, comma-separated; the first is the baseline "
                         f"of the ratios (default {GLIBC_MXFAST},0: glibc's default, and off)")
    ap.add_argument("--engine-only", action="store_true", help="skip the replay (part 1)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.max_fast.split(",")]

    backend, base, prompt = setup(args.variant)
    compiled, tokens = answer_tokens(backend, prompt, args.tokens)
    wait_quiet(0.3)
    set_max_fast = mallopt()
    runs: dict = {}
    between_tokens = betweens(backend, prompt)
    for rep in range(0 if args.engine_only else args.reps):
        for name, between in between_tokens.items():
            if name == FORWARD and set_max_fast is not None:  # the pass with fastbins on and with them off
                for size in on_off(rep):
                    set_max_fast(size)
                    runs.setdefault(name if size else "the same, glibc's fastbins off", []).append(
                        replay(compiled, tokens, between))
                set_max_fast(GLIBC_MXFAST)
            else:
                runs.setdefault(name, []).append(replay(compiled, tokens, between))
            if name == FORWARD:
                runs.setdefault(ON_THREAD, []).append(replay_on_thread(compiled, tokens, between))
    print()
    print(f"{utc_now()} · {machine_line()} · {args.variant} model, vocabulary {backend.vocab_size}, "
          f"{len(tokens)} tokens replayed, {args.reps} repetitions")
    if runs:
        print()
        print("| run before each token | consume the token (ms) | compute the next mask (ms) | the handoff (ms) |")
        print("| --- | --: | --: | --: |")
        for name, got in runs.items():
            cells = [f"{statistics.median(g[i] for g in got):.3f}" for i in range(len(got[0]))]
            print(f"| {name} | " + " | ".join(cells + ["—"] * (3 - len(cells))) + " |")

    if set_max_fast is None:
        print("\n(no glibc mallopt here: the fastbins A/B is skipped)")
        return
    out = fastbins_ab(backend, base, args.tokens, args.reps, set_max_fast, sizes)
    print()
    print("| through the engine | " + " | ".join(f"max fast {s}" for s in sizes) + " |")
    print("| --- |" + " --: |" * len(sizes))
    for key, label in (("plain", "a lone plain request, tok/s"), ("json", "a lone constrained request, tok/s"),
                       ("mask", "its mask's own time per token (ms)"), ("row", "a plain batch row, tok/s")):
        first = out[(sizes[0], key)]
        cells = []
        for size in sizes:
            got = out[(size, key)]
            ratios = [b / a for a, b in zip(first, got)]
            cells.append(f"{statistics.median(got):.3f}" + ("" if size == sizes[0] else
                                                             f" (×{statistics.median(ratios):.3f}, {iqr(ratios)})"))
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
