"""What the structured-output mask costs (not a test; run by hand from the repository root).

    python tools/bench_structured.py [--variant 50m] [--reps 8] [--tokens 300]

In process, on the MLX backend tinytitan serves with (``MLXBackend``), one model, the same prompt tokens:

- decode through the engine: tok/s of a lone JSON-schema-constrained request ÷ a lone plain one, as
  ``tinytitan serve`` decodes them (outside the batch, and every request with ``--max-batch 1``: the same
  step; the grammar's forced runs read in one forward pass each), ``--tokens`` tokens at most (the schema's document cannot end sooner; the plain answer ends early
  only if the model samples end-of-sequence: the token counts are printed), from the first token to the last.
- decode in the batch: the same ratio for a request decoding beside another (a plain request sent with it,
  with twice as many tokens to write), through the engine with ``max_batch`` 2: a constrained batch row's
  forced runs are read in the batch's one forward pass.
- decode token by token: the same ratio with mlx-lm's ``stream_generate`` and the mask as a logits
  processor (one token a step), both exactly ``--tokens`` tokens
  (end-of-sequence masked in both); also with the mask's forward-pass overlap turned off (``async_eval``
  removed), and the mask's own time per token (while the queued forward pass runs on the same cores, and
  with the pass done: on 2 cores the first is mostly the wait for a core); also llguidance alone replaying
  the same tokens with no forward pass between (its caches warm: what the mask costs where the forward pass
  does not run through the same CPU caches).
- the mask's own time per generated token as the engine reports it (``grammar_mask_s``, forced runs
  included), for the lone request and the batch row above.
- TTFT: time to the first token of a request with a schema never seen before (grammar compile included:
  ``prepare`` compiles it) ÷ the same request without a format. Both with reasoning off (a request with a
  format always decodes so; the chat template renders the two alike then), so the prompts are the same.

Every repetition runs all sides back to back in a rotating order; the table gives the median of the
per-repetition ratios and their interquartile range (absolute times on a shared machine drift).
"""

from __future__ import annotations

import argparse
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

from bench_common import CpuWatch, ensure_model, machine_line, utc_now, wait_quiet  # noqa: E402


def schema(nonce: str) -> dict:
    """An array of records that cannot end within the run (minItems); ``nonce`` makes it new to the cache."""
    return {"type": "array", "minItems": 200, "items": {
        "type": "object", "additionalProperties": False, "required": ["name", "count", "ok", nonce],
        "properties": {"name": {"type": "string", "maxLength": 16},
                       "count": {"type": "integer", "minimum": 0, "maximum": 100000},
                       "ok": {"type": "boolean"}, nonce: {"enum": ["a", "b", None]}}}}


def decode_rate(backend, prompt, tokens: int, processors) -> tuple[float, int]:
    """tok/s from the first token to the last (``processors`` applied, end-of-sequence masked)."""
    import mlx.core as mx
    from mlx_lm import stream_generate
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.sample_utils import make_sampler

    eos = sorted(backend.tokenizer.eos_token_ids)

    def no_eos(_tokens, logits):
        return logits.at[..., eos].add(-1e9) if hasattr(logits, "at") else logits

    kv = make_prompt_cache(backend.model)
    first = last = None
    n = 0
    for resp in stream_generate(backend.model, backend.tokenizer, mx.array(prompt), max_tokens=tokens,
                                sampler=make_sampler(temp=1.0), logits_processors=[no_eos, *processors],
                                prompt_cache=kv):
        now = time.perf_counter()
        first = first or now
        last = now
        n += 1
    return (n - 1) / (last - first), n


class NoOverlapMask:
    """The mask without ``async_eval`` before it waits for the sampled token (the A/B of the overlap)."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, tokens, logits):
        import mlx.core as mx

        m = self.inner
        if m.started:
            m.consume(int(tokens[-1].item()))
        m.started = True
        return mx.where(m.allowed_mx(logits.shape[-1]), logits, m.refused(logits.dtype))


class TimedMask:
    """Times the mask's own work (consuming the sampled token, computing the mask), not the wait for the
    sampled token that the processor call also holds."""

    def __init__(self, mask):
        self.seconds = 0.0
        self.calls = 0
        self.tokens: list[int] = []  # the tokens consumed, in order (for ``warm_replay``)
        for name in ("consume", "allowed_mx"):
            setattr(mask, name, self._timed(getattr(mask, name)))

    def _timed(self, fn):
        def run(*a):
            if fn.__name__ == "consume":
                self.tokens.append(a[0])
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += fn.__name__ == "allowed_mx"
        return run


def warm_replay(compiled, tokens: list[int]) -> float:
    """ms per token llguidance takes to compute each mask and consume each token of ``tokens``, one after the
    other with nothing between (its caches warm), on a fresh matcher: the mask's cost without the forward pass
    running through the same CPU caches between two tokens."""
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(1, compiled.vocab_size)
    t0 = time.perf_counter()
    for token in tokens:
        fill_next_token_bitmask(matcher, bitmask)
        matcher.consume_token(token)
    fill_next_token_bitmask(matcher, bitmask)
    return (time.perf_counter() - t0) / (len(tokens) + 1) * 1000


def own_mask_ms(fin) -> float | None:
    """The mask's own ms per generated token, as the engine reports it (None without a mask)."""
    seconds = fin.timing.grammar_mask_s
    return None if seconds is None else seconds / max(fin.usage.completion_tokens, 1) * 1000


def engine_rate(backend, base, tokens: int, nonce: str, constrained: bool) -> tuple[float, int, float | None]:
    """tok/s of one request alone through tinytitan's engine (what ``tinytitan serve`` does with a lone
    request: decoded outside the batch, a grammar's forced runs read in one forward pass each), from the
    first token to the last; sampled at temperature 1. → (tok/s, tokens, mask ms per token)."""
    import trio

    from tinytitan.chat_request import Grammar, Message
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Finished

    req = base.with_(messages=(Message("user", f"{nonce}: list them."),), max_tokens=tokens, temperature=1.0,
                     grammar=Grammar("json_schema", schema(nonce), where="response_format") if constrained else None)

    async def one():
        async with Engine(backend).session(req) as events:
            async for ev in events:
                if isinstance(ev, Finished):
                    return ev

    fin = trio.run(one)
    return fin.timing.decode_tokens / fin.timing.decode_s, fin.usage.completion_tokens, own_mask_ms(fin)


def batch_rate(backend, base, tokens: int, nonce: str, constrained: bool) -> tuple[float, int, float | None]:
    """tok/s of one request decoding in the batch beside another (a plain request with twice as many tokens to
    write, sent at the same time, so the measured one is a batch row from its first token to its last):
    what a constrained batch row costs against a plain one. → (tok/s, tokens, mask ms per token)."""
    import trio

    from tinytitan.chat_request import Grammar, Message
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Finished

    req = base.with_(messages=(Message("user", f"{nonce}: list them."),), max_tokens=tokens, temperature=1.0,
                     grammar=Grammar("json_schema", schema(nonce), where="response_format") if constrained else None)
    other = base.with_(messages=(Message("user", f"{nonce}: tell me a long story."),), max_tokens=2 * tokens,
                       temperature=1.0)
    engine = Engine(backend, max_batch=2)
    got = {}

    async def one(name, r):
        async with engine.session(r) as events:
            async for ev in events:
                if isinstance(ev, Finished):
                    got[name] = ev

    async def both():
        async with trio.open_nursery() as n:
            n.start_soon(one, "other", other)
            n.start_soon(one, "measured", req)

    trio.run(both)
    fin = got["measured"]
    return fin.timing.decode_tokens / fin.timing.decode_s, fin.usage.completion_tokens, own_mask_ms(fin)


def ttft(backend, req) -> float:
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.events import TextDelta

    seen: list[float] = []

    def emit(ev):
        if isinstance(ev, TextDelta) and not seen:
            seen.append(time.perf_counter())

    t0 = time.perf_counter()
    prepared = backend.prepare(req)  # renders, tokenizes and (with a format) compiles the grammar
    backend.decode(prepared, DecodeLoop(backend.parser(prepared), (), emit), lambda: bool(seen))
    return seen[0] - t0


def run_sides(sides: list[str], backend, base, prompt, tokens: int) -> tuple[dict, dict]:
    """One repetition: every side once, in the order given → (results, mask ms per token: overlapped with the
    forward pass, ``constrained``, after it, ``no_overlap``, and llguidance replaying the tokens, ``warm``)."""
    from tinytitan.chat_request import Grammar, Message
    from tinytitan.engine.structured import GrammarMask, compile_grammar

    out, mask_ms = {}, {}
    for side in sides:
        nonce = "k" + uuid.uuid4().hex[:8]
        if side == "plain":
            out[side] = decode_rate(backend, prompt, tokens, [])[0]
        elif side in ("engine_plain", "engine_json"):
            out[side], out[side + "_n"], out[side + "_mask"] = engine_rate(backend, base, tokens, nonce,
                                                                           side == "engine_json")
        elif side in ("batch_plain", "batch_json"):
            out[side], out[side + "_n"], out[side + "_mask"] = batch_rate(backend, base, tokens, nonce,
                                                                          side == "batch_json")
        elif side in ("constrained", "no_overlap"):
            compiled = compile_grammar(Grammar("json_schema", schema(nonce)), backend.tokenizer, backend.vocab_size)
            mask = GrammarMask(compiled)
            timed = TimedMask(mask)
            out[side] = decode_rate(backend, prompt, tokens, [mask if side == "constrained" else NoOverlapMask(mask)])[0]
            mask_ms[side] = timed.seconds / timed.calls * 1000
            if side == "constrained":
                mask_ms["warm"] = warm_replay(compiled, timed.tokens)
        elif side == "ttft_plain":
            out[side] = ttft(backend, base.with_(messages=(Message("user", f"{nonce}: list them."),)))
        else:
            out[side] = ttft(backend, base.with_(messages=(Message("user", f"{nonce}: list them."),),
                                                 grammar=Grammar("json_schema", schema(nonce))))
    return out, mask_ms


def iqr(xs: list[float]) -> str:
    if len(xs) < 4:
        return "—"
    q = statistics.quantiles(xs, n=4)
    return f"{q[0]:.3f}–{q[2]:.3f}"


def setup(variant: str):
    """The MLX backend tinytitan serves the model with, the benchmark's request (a plain one; each side changes
    it) and its prompt tokens."""
    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.backends.mlx import MLXBackend

    backend = MLXBackend(ensure_model(variant), f"tinytitan-{variant}", prompt_cache_bytes=64 << 20)
    base = ChatRequest(model=backend.model_id, messages=(Message("user", "List the records as JSON."),),
                       max_tokens=4, temperature=0.0, reasoning=False)
    return backend, base, backend.prepare(base).tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="50m")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--max-foreign", type=float, default=0.3,
                    help="redo a repetition during which other processes used more cores than this")
    ap.add_argument("--retries", type=int, default=3)
    args = ap.parse_args()

    import llguidance

    backend, base, prompt = setup(args.variant)
    ratios: dict[str, list[float]] = {"constrained": [], "no_overlap": [], "ttft": [], "engine": [], "batch": []}
    overlapped_ms: list[float] = []
    mask_alone_ms: list[float] = []
    warm_ms: list[float] = []
    engine_ms: dict[str, list[float]] = {"engine": [], "batch": []}
    redone = 0
    rep = 0
    while rep < args.reps:
        sides = ["plain", "constrained", "no_overlap", "ttft_plain", "ttft_schema", "engine_plain", "engine_json",
                 "batch_plain", "batch_json"]
        sides = sides[rep % len(sides):] + sides[:rep % len(sides)]
        wait_quiet(args.max_foreign)
        with CpuWatch() as watch:
            out, mask_time = run_sides(sides, backend, base, prompt, args.tokens)
        if watch.foreign > args.max_foreign and redone < args.retries * args.reps:
            redone += 1
            print(f"rep {rep}: other processes used {watch.foreign:.2f} cores meanwhile; redone", flush=True)
            continue
        rep += 1
        overlapped_ms.append(mask_time["constrained"])
        mask_alone_ms.append(mask_time["no_overlap"])
        warm_ms.append(mask_time["warm"])
        engine_ms["engine"].append(out["engine_json_mask"])
        engine_ms["batch"].append(out["batch_json_mask"])
        ratios["constrained"].append(out["constrained"] / out["plain"])
        ratios["no_overlap"].append(out["no_overlap"] / out["plain"])
        ratios["ttft"].append(out["ttft_schema"] / out["ttft_plain"])
        ratios["engine"].append(out["engine_json"] / out["engine_plain"])
        ratios["batch"].append(out["batch_json"] / out["batch_plain"])
        print(f"rep {rep}: plain {out['plain']:.1f} tok/s, constrained {out['constrained']:.1f}, "
              f"no overlap {out['no_overlap']:.1f}; TTFT {out['ttft_plain'] * 1000:.1f} ms plain, "
              f"{out['ttft_schema'] * 1000:.1f} ms with a new schema; engine: plain {out['engine_plain']:.1f} tok/s "
              f"({out['engine_plain_n']} tokens), constrained {out['engine_json']:.1f} ({out['engine_json_n']}); "
              f"a batch row: plain {out['batch_plain']:.1f}, constrained {out['batch_json']:.1f} "
              f"(others used {watch.foreign:.2f} cores)",
              flush=True)
    print()
    print(f"{utc_now()} · {machine_line()} · llguidance {llguidance.__version__ if hasattr(llguidance, '__version__') else llguidance.get_version()} · "
          f"{args.variant} model, vocabulary {backend.vocab_size}, {args.tokens} tokens, {args.reps} repetitions "
          f"({redone} redone: other processes over {args.max_foreign} cores)")
    print()
    print("| measure | median | IQR |")
    print("| --- | --- | --- |")
    print(f"| constrained ÷ unconstrained decode tok/s, a lone request through the engine (also --max-batch 1: "
          f"forced runs in one pass) | {statistics.median(ratios['engine']):.3f} | {iqr(ratios['engine'])} |")
    print(f"| constrained ÷ unconstrained decode tok/s, a row in the batch beside another (its forced runs in "
          f"the batch's one pass) | {statistics.median(ratios['batch']):.3f} | {iqr(ratios['batch'])} |")
    print(f"| same, token by token (mlx-lm's generate_step with the mask) | "
          f"{statistics.median(ratios['constrained']):.3f} | {iqr(ratios['constrained'])} |")
    print(f"| same, mask not overlapped with the forward pass | {statistics.median(ratios['no_overlap']):.3f} | "
          f"{iqr(ratios['no_overlap'])} |")
    print(f"| TTFT with a new schema ÷ without a format | {statistics.median(ratios['ttft']):.3f} | "
          f"{iqr(ratios['ttft'])} |")
    print(f"| mask time per token (ms: consume the sampled token, compute the mask), while the forward pass runs "
          f"on the same cores | {statistics.median(overlapped_ms):.3f} | {iqr(overlapped_ms)} |")
    print(f"| same, the forward pass done (the mask's own cost) | {statistics.median(mask_alone_ms):.3f} | "
          f"{iqr(mask_alone_ms)} |")
    print(f"| same tokens, llguidance alone with nothing between them (its caches warm) | "
          f"{statistics.median(warm_ms):.3f} | {iqr(warm_ms)} |")
    print(f"| the mask's own time per generated token through the engine (grammar_mask_s), a lone request | "
          f"{statistics.median(engine_ms['engine']):.3f} | {iqr(engine_ms['engine'])} |")
    print(f"| same, a batch row | {statistics.median(engine_ms['batch']):.3f} | {iqr(engine_ms['batch'])} |")


if __name__ == "__main__":
    main()
