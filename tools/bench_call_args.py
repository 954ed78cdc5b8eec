#!/usr/bin/env python3
"""Does a long tool-call argument cost the parser the same per token as a short one? In process, the output parser
alone (no engine, no tokenizer): for each call syntax, on a family that writes it, one call whose one string
argument (``--typed``: an array) is N tokens long (about 4 characters each), rendered as the family renders a past
call and fed to its streaming parser a token at a time; the thread's CPU µs per token at each size (the fastest of
``--reps``) and the ratio largest ÷ smallest (flat ≈ 1.0; a parser that copies its whole text per token grows
with N).

    python tools/bench_call_args.py                          # 2k and 32k tokens, every syntax: about a minute
    python tools/bench_call_args.py --typed                  # the argument an array of strings instead
    python tools/bench_call_args.py --sizes 32000 --syntaxes xml --profile out.prof
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinytitan.engine.families import FAMILIES  # noqa: E402
from tinytitan.engine.families.syntaxes import SYNTAXES  # noqa: E402

WORDS = ["the ", "rive", "r st", "one,", " lig", "ht n", "orth", " qui", "et t", "able"]
SCHEMA = {"write_file": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                                                        "lines": {"type": "array"}}}}


def family_of(syntax: str):
    return next(f for f in FAMILIES.values() if f.syntax.name == syntax)


def per_token(family, tokens: int, typed: bool = False) -> float:
    if typed:  # an array of short strings (``["the ", "rive", …]``: about 6 characters an item)
        args = {"lines": [WORDS[i % len(WORDS)] for i in range(tokens * 2 // 3)]}
    else:
        args = {"path": "a.md", "content": "".join(WORDS[i % len(WORDS)] for i in range(tokens))}
    raw = family.render_calls([("write_file", args)])
    pieces = [raw[i:i + 4] for i in range(0, len(raw), 4)]
    parser = family.parser(False, {}, SCHEMA)
    start = time.thread_time()
    done = 0
    for piece in pieces:
        done += sum(1 for e in parser.feed(piece)[0] if type(e).__name__ == "ToolCallDone")
    done += sum(1 for e in parser.finish() if type(e).__name__ == "ToolCallDone")
    assert done == 1, (family.name, done)
    return (time.thread_time() - start) / len(pieces) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000,32000", help="argument sizes in tokens (comma-separated)")
    p.add_argument("--syntaxes", default=",".join(sorted(SYNTAXES)))
    p.add_argument("--typed", action="store_true", help="the argument is an array (a typed value), not a string")
    p.add_argument("--reps", type=int, default=3, help="runs per size (the fastest counts)")
    p.add_argument("--profile", metavar="FILE", help="write a cProfile of the run to FILE")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    prof = cProfile.Profile() if a.profile else None
    if prof:
        prof.enable()
    print(f"{'syntax':<12} {'family':<14} " + " ".join(f"{f'{n} tok µs':>12}" for n in sizes) + "   ratio")
    for name in a.syntaxes.split(","):
        family = family_of(name)
        per_token(family, 200, a.typed)  # (warm: the checking grammar is built on its first block)
        us = [min(per_token(family, n, a.typed) for _ in range(a.reps)) for n in sizes]
        print(f"{name:<12} {family.name:<14} " + " ".join(f"{u:>12.2f}" for u in us) + f"   {us[-1] / us[0]:.2f}")
    if prof:
        prof.disable()
        prof.dump_stats(a.profile)


if __name__ == "__main__":
    main()
