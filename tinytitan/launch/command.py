"""The ``tinytitan launch`` command (see ``tinytitan/launch/__init__.py`` for the rules)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from .fit import misfit
from .server import LaunchError, StartedServer, codex_catalog, probe
from .settings import AGENTS, INSTALL, NAMES, PROGRAMS, Served, invocation

DEFAULT_PORT = 8096
LAUNCH_ONLY = ("--print", "--fast", "--force")
# serve flags that say which server and model launch wants: checked against a server already running (_pick)
WHERE_FLAGS = ("--port", "--host", "--api-key", "--model", "--model-id", "--models-dir")
SCRIPTED_ID = "tinytitan-scripted"  # what `serve --script` serves without --model-id (model_setup.py)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tinytitan launch", usage="tinytitan launch AGENT [options] [serve options] [-- AGENT_ARGS]",
        description="Serve a model (or reuse the server already running for it on the port), then run a coding "
                    "agent with the settings that fit it: base URL, key, window and output cap, telemetry and "
                    "update checks off. The user's own configuration files are never written.",
        epilog="Everything after -- goes to the agent, e.g. tinytitan launch claude -- -p 'fix the test'. Any "
               "other `tinytitan serve` flag (--kv-bits, --memory, --max-batch …) is passed on to the server it "
               "starts. Docs: docs/agents/ (one page per agent) and docs/cli.md.")
    p.add_argument("agent", choices=AGENTS, metavar="AGENT", help="one of: " + ", ".join(AGENTS))
    how = p.add_argument_group("launch")
    how.add_argument("--print", action="store_true",
                     help="show the server command, the agent's environment, command line and files (written, so "
                          "the line works as printed), and run nothing (a server not yet running is started for a "
                          "moment to read the model's window)")
    how.add_argument("--fast", action="store_true",
                     help="point the agent at '<id>-fast': chat only, no tools or system prompt (fits any window)")
    how.add_argument("--force", action="store_true",
                     help="start the agent even when its first prompt cannot fit the model's window")
    model = p.add_argument_group("the model (as tinytitan serve takes them)")
    model.add_argument("--model", metavar="MODEL", help="an MLX directory, a .gguf file, a Hugging Face repo id, "
                                                        "or 'smollm2'; default: the demo model")
    model.add_argument("--script", metavar="FILE", help="the scripted backend (tests, demos)")
    model.add_argument("--models-dir", metavar="DIR", help="a catalog; with --model-id, the model to use")
    model.add_argument("--model-id", metavar="NAME", help="the name the model is served by")
    model.add_argument("--context-window", type=int, metavar="TOKENS",
                       help="the scripted backend's context window")
    net = p.add_argument_group("where (as tinytitan serve takes them)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT,
                     help=f"the server's port (default {DEFAULT_PORT}); a server running there is reused; 0: a "
                          "server started on a free port")
    net.add_argument("--api-key", metavar="KEY", help="the server's key (default: none; the agent sends 'local')")
    return p


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def parse(argv: list[str]):
    """(launch options, serve's namespace, the argv for `tinytitan serve`, the agent's own args)."""
    ours, agent_args = split_argv(argv)
    parser = build_parser()
    opts, _ = parser.parse_known_args(ours)
    if ours and ours[0] != opts.agent:
        parser.error("name the agent first: tinytitan launch AGENT [options]")
    serve_args = [a for a in ours[1:] if a not in LAUNCH_ONLY]
    from ..flags import build_parser as serve_parser

    ns = serve_parser().parse_args(["serve", *serve_args])
    return opts, ns, serve_args, agent_args


def own_dir(agent: str) -> Path:
    """Where launch keeps the files of its own an agent is pointed at."""
    from ..models.cache_dir import cache_root

    return cache_root() / "launch" / agent


def _say(text: str) -> None:
    print(f"tinytitan launch: {text}", file=sys.stderr, flush=True)


def _relay(line: str) -> None:
    """The server's log lines while it starts (conversion, download and load progress); its banner is left out:
    what it says for pasting by hand, launch does itself."""
    if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line) and " tinytitan.requests: " not in line:
        print("  " + line, file=sys.stderr, flush=True)


def not_applied(serve_args: list[str]) -> list[str]:
    """The serve flags among ``serve_args`` that only a server launch starts would take (``--kv-bits``,
    ``--memory``, ``--script`` …): a server already running keeps its own."""
    flags = [a.split("=", 1)[0] for a in serve_args if a.startswith("--")]
    return list(dict.fromkeys(f for f in flags if f not in WHERE_FLAGS))


def without_flag(args: list[str], flag: str) -> list[str]:
    """``args`` less each ``flag VALUE`` and ``flag=VALUE``."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def _pick(cards: list[dict], ns, base: str) -> dict:
    """The card of the model asked for among those served; a server serving another model is refused."""
    if not cards:
        raise LaunchError(f"{base} serves no model")
    ids = [c["id"] for c in cards]
    wanted = [w for w in (ns.model_id, ns.model and Path(ns.model).name, ns.model and Path(ns.model).stem,
                          ns.model, ns.script and not ns.model_id and SCRIPTED_ID) if w]
    for w in wanted:
        if w in ids:
            return cards[ids.index(w)]
    if wanted and not ns.models_dir:
        raise LaunchError(f"the server on {base} serves {', '.join(ids)}, not {wanted[0]}: stop it, or pass "
                          "--port for another server (or leave the model out to use it)")
    if ns.model_id and ns.models_dir:
        raise LaunchError(f"{ns.model_id} is not among the models served at {base}: {', '.join(ids)}")
    return cards[0]


def _shell(inv, serve_cmd: list[str] | None) -> str:
    lines = []
    if serve_cmd:
        lines += ["# the server (launch starts it when nothing answers on the port):", shlex.join(serve_cmd), ""]
    for path, text in inv.files.items():
        lines += [f"# {path} (written):", text.rstrip(), ""]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in inv.env.items())
    lines += ["# the agent:", f"{env} \\\n  {shlex.join(inv.argv)}" if env else shlex.join(inv.argv)]
    return "\n".join(lines)


def _ask_fast(message: str, fast_name: str) -> bool | None:
    """On a terminal: take the -fast name (True), go on anyway (False) or stop (None)."""
    print(message, file=sys.stderr)
    answer = input(f"Use '{fast_name}' instead [f], start anyway [a], or stop [S]? ").strip().lower()
    return {"f": True, "a": False}.get(answer[:1])


class Stopped(Exception):
    """launch was told to stop (SIGTERM, or SIGHUP: its terminal closed): what it started is stopped first."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stopped(signum, frame):
    raise Stopped(signum)


# (Windows has no SIGHUP)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _ignore_stops() -> None:
    """From here on a stop signal cuts nothing short (the wait for the agent, the server's stop)."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def exit_status(returncode: int) -> int:
    """A child's return code as a shell gives it: killed by signal N is 128 + N (Ctrl-C: 130)."""
    return 128 - returncode if returncode < 0 else returncode


def run(argv: list[str]) -> int:
    previous = {s: signal.signal(s, _stopped) for s in STOP_SIGNALS}
    try:
        return _run(argv)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run(argv: list[str]) -> int:
    opts, ns, serve_args, agent_args = parse(argv)
    agent = opts.agent
    program = PROGRAMS[agent]
    if not opts.print and shutil.which(program) is None:
        raise LaunchError(f"{NAMES[agent]} (`{program}`) is not installed: {INSTALL[agent]}")
    host = ns.host if ns.host not in ("0.0.0.0", "::", "[::]") else "127.0.0.1"
    port = ns.port  # 0: the server started binds a free port itself (two launches at once never collide)
    serve_args = without_flag(serve_args, "--port")  # (StartedServer adds the port)
    base = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    key = ns.api_key or "local"
    started = None
    try:
        cards = probe(base, ns.api_key) if port else None
        if cards is not None:
            _say(f"using the server already running at {base} ({', '.join(c['id'] for c in cards)})")
            unapplied = not_applied(serve_args)
            if unapplied:
                _say(f"{', '.join(unapplied)}: not applied, the server already running keeps the settings it was "
                     f"started with (stop it, or pass --port for a server launch starts with them)")
        else:
            log_path = own_dir(agent).parent / (f"serve-{port}.log" if port else f"serve-0-{os.getpid()}.log")
            started = StartedServer(serve_args, port, log_path)
            _say(f"starting tinytitan serve on {base if port else 'a free port'} (log: {log_path})")
            cards = started.wait_ready(base, ns.api_key, relay=_relay)
            if not port:
                base = f"{base.rsplit(':', 1)[0]}:{started.port}"
                _say(f"tinytitan serve is listening on {base}")
        card = _pick(cards, ns, base)
        model = card["id"] + ("-fast" if opts.fast and not card["id"].endswith("-fast") else "")
        problem = None if (opts.fast or opts.force) else misfit(agent, int(card["context_window"]), card["id"],
                                                                scripted=bool(ns.script))
        if problem:
            choice = _ask_fast(problem, card["id"] + "-fast") if (sys.stdin.isatty() and not opts.print) else None
            if choice is None:
                if not sys.stdin.isatty() or opts.print:
                    print(problem, file=sys.stderr)
                return 2
            if choice:
                model = card["id"] + "-fast"
        served = Served(base, model, key, card, codex_catalog(base, ns.api_key) if agent == "codex" else [])
        inv = invocation(agent, served, own_dir(agent), agent_args)
        for path, text in inv.files.items():  # launch's own files: written for --print too, so its line works
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if opts.print:
            print(_shell(inv, started.argv if started else None))
            return 0
        _say(f"{NAMES[agent]} on '{model}' ({served.window:,}-token window, {served.output_cap:,} output)")
        return _run_agent(inv)
    finally:
        if started is not None:
            _ignore_stops()
            started.stop()


def _run_agent(inv) -> int:
    """The agent in the foreground; Ctrl-C is its own (launch waits, as a shell does)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(inv.argv, env={**os.environ, **inv.env},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            return exit_status(proc.wait())
        except Stopped as stop:  # passed on to the agent, which is waited for (the server is stopped after)
            _ignore_stops()  # (a second signal would leave the agent running)
            if proc.poll() is None:
                proc.send_signal(stop.signum)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return 128 + stop.signum
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: list[str]) -> int:
    try:
        return run(argv)
    except LaunchError as exc:
        _say(str(exc))
        return 1
    except Stopped as stop:
        return 128 + stop.signum
    except KeyboardInterrupt:  # Ctrl-C before the agent started (the server loading, the fit question)
        return 130
