"""Fuzz every POST route of a real ``tinytitan serve --script`` with mutated bodies, and report counts.

The same generator and checks as tests/test_fuzz_requests.py (tests/request_fuzz.py), for as many bodies as
asked, with fresh randomness (``--seed`` to repeat a run). Every body is sent; nothing stops at the first
problem. Exit status 1 when any answer was a 5xx, a hang, out of its route's envelope, or the server was
not idle and healthy afterwards.

    python tools/fuzz_requests.py --bodies 20000
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

import request_fuzz as rf  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bodies", type=int, default=2000, help="mutated bodies to send (default 2000)")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    ap.add_argument("--show", type=int, default=20, help="problems to print in full (default 20)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    tally = rf.Tally()
    routes: Counter = Counter()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        server = rf.Server(Path(tmp))
        try:
            with httpx.Client(timeout=rf.ANSWER_SECONDS) as client:
                for case in rf.FIXED:
                    tally.add(case, rf.check(client, server.base, case))
                    routes[case.route.path] += 1

                @hypothesis_seed(seed)
                @settings(max_examples=args.bodies, deadline=None, database=None, phases=["generate"],
                          suppress_health_check=list(HealthCheck))
                @given(case=rf.cases())
                def run(case):
                    tally.add(case, rf.check(client, server.base, case))
                    routes[case.route.path] += 1
                    if tally.total % 1000 == 0:
                        print(f"  {tally.total} bodies, {time.monotonic() - started:.0f} s, "
                              f"{tally.server_errors} × 5xx, {tally.hangs} hangs", flush=True)

                run()
                after = rf.healthy(client, server.base)
        finally:
            server.close()
    took = time.monotonic() - started
    print(f"\nrequest fuzz: {tally.total} bodies in {took:.0f} s (seed {seed})")
    print("  by route:  " + ", ".join(f"{p} {n}" for p, n in sorted(routes.items())))
    print("  answers:   " + ", ".join(f"{k} {v}" for k, v in sorted(tally.statuses.items(), key=str)))
    print(f"  5xx: {tally.server_errors}   hangs: {tally.hangs}   other problems: "
          f"{len(tally.problems) - tally.server_errors - tally.hangs}   slowest answer: {tally.slowest:.2f} s")
    print(f"  afterwards: {after or 'idle and healthy'}")
    for p in tally.problems[: args.show]:
        print("  - " + p)
    return 1 if tally.problems or after else 0


if __name__ == "__main__":
    sys.exit(main())
