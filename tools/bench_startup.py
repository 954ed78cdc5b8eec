#!/usr/bin/env python3
"""How long ``tinytitan serve`` takes to print its banner ("tinytitan is serving …"), and where that time goes.

Every user waits for it at each start (``tinytitan launch AGENT`` starts a server too), and the test suite pays it
at every server it starts. Each start is a fresh process, ``python -m tinytitan serve --script S --port 0`` (the
scripted backend, a one-answer script) or ``--model DEMO`` (the demo model, random weights, built once), its
state database in a temporary directory (``--state``: the same one for every start, so after the first it is
opened, not created, as at a user's second start).

For each start: seconds from spawning the process to the banner, split into

- ``python``: the interpreter's own start (spawn to the first line of our bootstrap, ``site`` included),
- ``imports``: time inside ``import`` statements (and ``importlib.import_module``) on the main thread, wherever
  they run (module level, or in a function on first use); counted from the outermost import, so nested ones
  are not counted twice,
- ``rest``: everything else up to the banner (parsing the specs, building the protocols, opening the store,
  loading the model, binding the socket).

The bootstrap runs ``tinytitan.cli.main`` as ``-m tinytitan`` would; it only wraps ``__import__`` and the banner
function to take the times. Bytecode: Python's normal behaviour, ``__pycache__`` written beside the sources
(``PYTHONDONTWRITEBYTECODE`` is dropped from the environment; one start before the measured ones writes it);
``--no-bytecode`` keeps every module compiled afresh at each start (as with that variable set).

    python tools/bench_startup.py                        # scripted backend, 7 starts, about a minute
    python tools/bench_startup.py --models script,demo   # and the demo model
    python tools/bench_startup.py --baseline ../older    # another checkout's server too, started alternately:
                                                         # the ratio this ÷ that per pair, its median
    python tools/bench_startup.py --importtime 25        # the 25 costliest imports (python -X importtime)
    python tools/bench_startup.py --profile 30           # one start under cProfile: the 30 costliest tinytitan calls

Absolute seconds on a shared machine drift with its load; with ``--baseline`` read the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (ROOT, ensure_model, fmt, foreign_load, machine_line, median, stop_process, table,  # noqa: E402
                          utc_now)

BANNER = "tinytitan is serving '"
MARK = "@bench_startup "

# Run in the server's process: times the imports, then tinytitan's own CLI; the banner prints the marks.
BOOTSTRAP = r"""
import time
t_boot = time.time()
import builtins, importlib, os, sys, threading
main_thread = threading.main_thread()
spent = [0.0]
depth = [0]

def timed(fn):
    def wrapper(*args, **kwargs):
        if threading.current_thread() is not main_thread:
            return fn(*args, **kwargs)
        depth[0] += 1
        t0 = time.perf_counter() if depth[0] == 1 else None
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if t0 is not None:
                spent[0] += time.perf_counter() - t0
    return wrapper

builtins.__import__ = timed(builtins.__import__)
importlib.import_module = timed(importlib.import_module)
profile = os.environ.get("BENCH_STARTUP_PROFILE")
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
import tinytitan.serve as serve_module
real_banner = serve_module.banner

def banner(*args, **kwargs):
    t_banner = time.time()
    if profile:
        prof.disable()
        prof.dump_stats(profile)
    print(f"@bench_startup {t_boot!r} {spent[0]!r} {t_banner!r}", file=sys.stderr, flush=True)
    return real_banner(*args, **kwargs)

serve_module.banner = banner
from tinytitan.cli import main
sys.exit(main(sys.argv[1:]))
"""


def server_env(code: Path, bytecode: bool) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(code))
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def serve_args(model: str, work: Path) -> list[str]:
    args = ["serve", "--port", "0", "--state", str(work / "state"), "--log-level", "warning"]
    if model == "script":
        script = work / "script.yaml"
        script.write_text('["ok"]\n')
        return args + ["--script", str(script)]
    return args + ["--model", str(ensure_model(model)), "--prompt-cache-dir", "off"]


def start_once(code: Path, args: list[str], bytecode: bool, timeout: float = 120.0,
               profile: str | None = None) -> dict:
    """One start to the banner: its phases in seconds (the process is stopped once the banner is out)."""
    env = server_env(code, bytecode)
    if profile:
        env["BENCH_STARTUP_PROFILE"] = profile
    t_spawn = time.time()
    proc = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, *args], cwd=code, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        marks = None
        for line in proc.stderr:  # (the mark comes just before the banner; logs are at --log-level warning)
            if line.startswith(MARK):
                t_boot, imports, t_banner = map(float, line[len(MARK):].split())
                marks = {"total": t_banner - t_spawn, "python": t_boot - t_spawn, "imports": imports,
                         "rest": t_banner - t_boot - imports}
                break
            if time.monotonic() > deadline:
                break
        if marks is None:
            raise RuntimeError(f"no banner from {code} (rc {proc.poll()}):\n{proc.stderr.read()[-3000:]}")
        for line in proc.stdout:
            if BANNER in line:
                break
        return marks
    finally:
        stop_process(proc)


def iqr(xs: list[float]) -> str:
    if len(xs) < 4:
        return "—"
    q = statistics.quantiles(xs, n=4)
    return f"{q[0]:.2f}–{q[2]:.2f}"


def run(args) -> None:
    sides = [("this", ROOT)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    print(f"# tinytitan serve: seconds to the banner ({utc_now()})\n\n{machine_line()}; "
          f"bytecode {'cached' if args.bytecode else 'compiled at every start'}; "
          f"other processes' load before: {foreign_load(1.0):.2f} cores\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        for model in args.models:
            work = {name: Path(tmp) / f"{model}-{name}" for name, _ in sides}
            for name, code in sides:  # (one start unmeasured: bytecode written, the database created)
                work[name].mkdir()
                start_once(code, serve_args(model, work[name]), args.bytecode)
            got: dict[str, list[dict]] = {name: [] for name, _ in sides}
            for rep in range(args.starts):
                order = sides if rep % 2 == 0 else sides[::-1]
                for name, code in order:
                    got[name].append(start_once(code, serve_args(model, work[name]), args.bytecode))
            for name, _ in sides:
                runs = got[name]
                total = [r["total"] for r in runs]
                rows.append([model, name, len(runs), fmt(median(total), ".2f"), iqr(total),
                             *(fmt(median([r[k] for r in runs]), ".2f") for k in ("python", "imports", "rest"))])
            if args.baseline:
                ratios = [a["total"] / b["total"] for a, b in zip(got["this"], got["baseline"])]
                rows.append([model, "this ÷ baseline", len(ratios), fmt(median(ratios), ".3f"), iqr(ratios),
                             "", "", ""])
    print(table(["backend", "server", "starts", "to banner (median s)", "IQR", "python", "imports", "rest"], rows))
    print(f"\nother processes' load after: {foreign_load(1.0):.2f} cores")


def importtime(args) -> None:
    """One start under ``python -X importtime``: the costliest imports by their own time (children excluded)
    and, for the modules tinytitan imports directly, by their cumulative time."""
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        log = Path(tmp) / "importtime.log"
        with open(log, "w") as err:
            proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "tinytitan",
                                     *serve_args(args.models[0], Path(tmp))], cwd=ROOT,
                                    env=server_env(ROOT, args.bytecode), stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                for line in proc.stdout:
                    if BANNER in line:
                        break
                lines = log.read_text().splitlines()  # (what was imported up to the banner)
            finally:
                proc.terminate()
                proc.wait()
    rows = []
    for line in lines:
        if line.startswith("import time:") and "self [us]" not in line:
            own, cumulative, name = line[len("import time:"):].split("|")
            rows.append((len(name) - len(name.lstrip()), name.strip(), int(own) / 1e6, int(cumulative) / 1e6))
    total = sum(r[2] for r in rows)
    print(f"{len(rows)} modules imported, {total:.2f} s in their own code under -X importtime (which inflates it)\n")
    costliest = sorted(rows, key=lambda r: -r[2])[:args.importtime]
    print(table(["module", "own s"], [[name, f"{own:.3f}"] for _, name, own, _ in costliest]))
    # a module's parent is the next line below it that is less indented (importtime prints children first)
    direct = []
    for i, (d, name, _, cum) in enumerate(rows):
        parent = next((r for r in rows[i + 1:] if r[0] < d), None)
        if parent and parent[1].startswith("tinytitan") and not name.startswith("tinytitan"):
            direct.append((name, parent[1], cum))
    print("\nthird-party modules tinytitan imports first, by cumulative time:\n")
    print(table(["module", "imported by", "cumulative s"],
                [[n, p, f"{c:.3f}"] for n, p, c in sorted(direct, key=lambda r: -r[2])[:args.importtime]], "llr"))


def profile(args) -> None:
    import pstats

    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        out = str(Path(tmp) / "startup.prof")
        start_once(ROOT, serve_args(args.models[0], Path(tmp)), args.bytecode, profile=out)
        stats = pstats.Stats(out)
        stats.sort_stats("cumulative").print_stats("tinytitan/", args.profile)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="script", help="comma-separated: script (the scripted backend), demo, 50m")
    ap.add_argument("--starts", type=int, default=7, help="measured starts per backend (and per side)")
    ap.add_argument("--baseline", metavar="DIR", help="another checkout: its server is started alternately")
    ap.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                    help="compile every module at every start (PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--importtime", type=int, metavar="N", help="instead: the N costliest imports of one start")
    ap.add_argument("--profile", type=int, metavar="N", help="instead: one start under cProfile, N lines")
    args = ap.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.importtime:
        importtime(args)
    elif args.profile:
        profile(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
