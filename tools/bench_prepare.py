#!/usr/bin/env python3
"""Tokenizing an agent's next turn: the ids ``prepare`` makes from the prompt cache ÷ tokenizing the prompt whole.

In process, on the demo model's tokenizer and chat template (a real Qwen-style tokenizer; its weights play no
part): an agent session of ``--turns`` turns over a long system prompt, every turn sending the whole
conversation again with the previous answer and a new user message. Each answer is stored in the prompt cache
as a generation would store it (the prompt's ids, then the answer's), so the next turn's ``prepare`` finds it.
Per turn: ``tokenize_s`` as ``prepare`` reports it (the splice of cached ids, the rest tokenized, the check that
the ids decode to the rendered prompt) and the time to tokenize the same rendered prompt whole; the ratio of
the two, the median over turns 2+.

Variants:
- ``thinking-off``: ``reasoning: false``: the template writes an empty thinking block into the generation prompt
  that the same turn, once in the history, does not have: the cached prompt matches all but its last characters.
- ``answer-back``: reasoning left to the template (none here): the cached prompt matches whole and the answer
  comes back as generated (its ids spliced in).

    python tools/bench_prepare.py                      # 8 turns, 3 repetitions: a few seconds
    python tools/bench_prepare.py --turns 12 --reps 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine_line, utc_now  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def session(backend, variant: str, turns: int, seed: int) -> list[tuple[int, float, float]]:
    """One agent session → per turn (prompt tokens, prepare's tokenize ms, tokenizing whole ms)."""
    from tinytitan.chat_request import ChatRequest, Message

    rng = random.Random(seed)
    words = (ROOT / "README.md").read_text().split()
    para = lambda n: " ".join(rng.choice(words) for _ in range(n))  # noqa: E731
    tok = backend.tokenizer
    backend.prompt_cache.clear()
    msgs = [("system", para(3000))]
    rows = []
    for turn in range(turns):
        msgs.append(("user", para(500)))
        req = ChatRequest(model=backend.model_id, messages=tuple(Message(r, c) for r, c in msgs), temperature=0,
                          reasoning=False if variant == "thinking-off" else None)
        p = backend.prepare(req)
        started = time.perf_counter()
        whole = tok.encode(p.prompt_text, add_special_tokens=False)
        plain_s = time.perf_counter() - started
        if variant == "answer-back":
            assert list(whole) == p.tokens or turn, "the first turn's ids are the plain tokenization"
        answer = para(300)
        backend.prompt_cache.store(p.tokens + tok.encode(answer + "<|im_end|>", add_special_tokens=False), None)
        rows.append((len(p.tokens), p.tokenize_s * 1000, plain_s * 1000))
        msgs.append(("assistant", answer))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tinytitan.demo_model import demo_model_id, ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend

    backend = MLXBackend(ensure_demo_model(), demo_model_id())
    print(f"{utc_now()} · {machine_line()} · demo tokenizer, {args.turns} turns, {args.reps} repetitions\n")
    print("| variant | prompt tokens (last turn) | prepare's tokenize ms (turns 2+, median) | tokenizing whole ms "
          "| ratio (median of turns) |")
    print("|:--|--:|--:|--:|--:|")
    for variant in ("thinking-off", "answer-back"):
        rows = [r for rep in range(args.reps) for r in session(backend, variant, args.turns, rep)[1:]]
        ratios = [spliced / whole for _, spliced, whole in rows]
        print(f"| {variant} | {max(n for n, _, _ in rows)} | {statistics.median(s for _, s, _ in rows):.1f} "
              f"| {statistics.median(w for _, _, w in rows):.1f} | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
