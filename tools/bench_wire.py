#!/usr/bin/env python3
"""What a streamed token costs the server between the engine's TokenEvent and the bytes on the socket, in CPU
time (not wall: the machine is shared, and CPU time is what the decode thread loses to the event loop).

``--mode machine`` (in process, no engine, no socket): for each protocol, ``Started``, N ``TextDelta`` events of a
few characters and ``Finished`` through the protocol's own streaming path (its machine, the spec's templates, the
JSON and the framing: ``Protocol.answer``), each chunk then through h11 as hypercorn frames it (a chunked
response body); this thread's CPU time (``time.thread_time``) per token, median of ``--reps`` runs.

``--mode http``: ``tinytitan serve --script`` (the scripted backend, one token every ``--delay-ms`` so that each
token is written alone, as a model's would be) on loopback, one streamed request at a time per protocol read by
the benchmarks' lean client; the server's CPU per token from /proc: its event loop's thread (the main thread:
the protocol machine, quart, hypercorn, h11, the socket) and the whole process (the model thread's scripted
decode and fold too), median of ``--reps`` requests. Linux only.

    python tools/bench_wire.py                      # both modes, about 90 s on 2 cores
    python tools/bench_wire.py --mode machine --profile out.prof --protocols chat
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "tinytitan-scripted"
PIECES = [" the", " river", " stone", ",", " light", " north", " quiet", " table", "\n", " ok", " é", " \"q\""]


def requests(protocol: str, cap: int) -> tuple[str, dict]:
    msgs = [{"role": "user", "content": "write"}]
    return {
        "chat": ("/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": cap, "stream": True}),
        "completions": ("/v1/completions", {"model": MODEL, "prompt": "write", "max_tokens": cap, "stream": True}),
        "responses": ("/v1/responses", {"model": MODEL, "input": "write", "max_output_tokens": cap, "stream": True,
                                        "store": False}),
        "anthropic": ("/v1/messages", {"model": MODEL, "messages": msgs, "max_tokens": cap, "stream": True}),
        "ollama": ("/api/chat", {"model": MODEL, "messages": msgs, "stream": True, "options": {"num_predict": cap}}),
    }[protocol]


CLASSES = {"chat": "OpenAIChat", "completions": "OpenAICompletions", "responses": "OpenAIResponses",
           "anthropic": "AnthropicMessages", "ollama": "Ollama"}


def machine_mode(args) -> dict[str, float]:
    import json

    import h11
    import trio

    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry, demo_tokenizer
    from tinytitan.engine.engine import Engine
    from tinytitan.events import Finished, Started, TextDelta, Usage
    from tinytitan.http.app import Server, ServerConfig
    from tinytitan.protocols.registry import all_protocols
    from tinytitan.protocols.wire import Call

    protocols = all_protocols(None)
    Server(Engine(ScriptedBackend([ScriptEntry("")], demo_tokenizer(), model_id=MODEL), max_queue=4), protocols,
           ServerConfig())  # attaches the protocols' services
    by_class = {type(p).__name__: p for p in protocols}
    n = args.tokens
    texts = [PIECES[i % len(PIECES)] for i in range(n)]

    async def events():
        yield Started(5)
        for t in texts:
            yield TextDelta(t)
        yield Finished("length", Usage(5, 0, n, 0))

    async def once(proto, path: str, body: dict) -> tuple[float, int]:
        v = proto.validate(Call("POST", path, {"content-type": "application/json"}, body=json.dumps(body).encode()))
        machine = proto.machine(v, MODEL, True)
        for name in ("prompt_tokens", "cache_miss", "cache_compared"):
            machine.context.setdefault(name, 5 if name == "prompt_tokens" else None)
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        conn.next_event()
        conn.next_event()
        conn.send(h11.Response(status_code=200, headers=[("content-type", "text/event-stream")]))
        written = 0
        t0 = time.thread_time()
        reply = await proto.answer(v, machine, events())
        async for chunk in reply.stream:
            written += len(conn.send(h11.Data(data=chunk)))
        written += len(conn.send(h11.EndOfMessage()))
        return time.thread_time() - t0, written

    async def main() -> dict[str, float]:
        out = {}
        for name in args.protocols.split(","):
            proto = by_class[CLASSES[name]]
            path, body = requests(name, n + 16)
            await once(proto, path, body)  # warm
            runs = [await once(proto, path, body) for _ in range(args.reps)]
            out[name] = statistics.median(r[0] for r in runs) / n * 1e6
            print(f"machine {name:12} {out[name]:7.1f} µs a token  ({runs[0][1] / n:.0f} bytes a token)", flush=True)
        return out

    if args.profile:
        prof = cProfile.Profile()
        result = prof.runcall(trio.run, main)
        prof.dump_stats(args.profile)
        return result
    return trio.run(main)


def _cpu(pid: int, tid: int | None = None) -> float:
    """CPU time of one thread of a process (or of all its threads), seconds: the scheduler's own count in ns
    (``schedstat``), not utime's 10 ms ticks."""
    tids = [tid] if tid else os.listdir(f"/proc/{pid}/task")
    total = 0
    for t in tids:
        try:
            total += int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile (its time is lost: a worker's, not the loop's)
            pass
    return total / 1e9


def _post(port: int, path: str, body: dict) -> tuple[int, bytes]:
    """A streamed request read whole, as it arrives (the client's work kept small: it shares the CPU)."""
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(),
                     headers={"content-type": "application/json", "anthropic-version": "2023-06-01"})
        resp = conn.getresponse()
        data = bytearray()
        while chunk := resp.read1(65536):
            data += chunk
        return resp.status, bytes(data)
    finally:
        conn.close()


def http_mode(args) -> dict[str, tuple[float, float]]:
    """Per protocol, ``--reps`` pairs of a short answer and a long one; a token's CPU is the long one's less the
    short one's, over the tokens between them (what a request costs whatever its length cancels out)."""
    import subprocess

    import yaml

    from bench_common import free_port

    from tinytitan.engine.backends.scripted import demo_tokenizer

    tok = demo_tokenizer()
    texts = ["".join(PIECES[i % len(PIECES)] for i in range(n)) for n in (args.http_tokens // 20, args.http_tokens)]
    sizes = [len(tok.encode(t, add_special_tokens=False)) for t in texts]
    protocols = args.protocols.split(",")
    order = [i for _ in protocols for _ in range(args.reps + 1) for i in (0, 1)]  # the script's answers, in turn
    tmp = Path(tempfile.mkdtemp(prefix="bench-wire-"))
    script = tmp / "script.yaml"
    script.write_text(yaml.safe_dump([{"output": texts[i], "delay_ms": args.delay_ms} for i in order]))
    port = free_port()
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tinytitan", "serve", "--script", str(script), "--port", str(port),
                             "--log-level", "warning", *args.serve_args.split()], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out = {}
    try:
        t_end = time.monotonic() + 60
        while "serving" not in (tmp / "server.log").read_text():
            if proc.poll() is not None or time.monotonic() > t_end:
                raise RuntimeError("server did not start:\n" + (tmp / "server.log").read_text()[-2000:])
            time.sleep(0.2)
        for name in protocols:
            path, body = requests(name, sizes[1] + 64)
            loop, whole = [], []
            for rep in range(args.reps + 1):
                spent = []
                for text in texts:
                    c0, p0 = _cpu(proc.pid, proc.pid), _cpu(proc.pid)
                    status, data = _post(port, path, body)
                    c1, p1 = _cpu(proc.pid, proc.pid), _cpu(proc.pid)
                    if status != 200 or b'"error":{' in data[-3000:] or len(data) < 50 * len(text.split()):
                        raise RuntimeError(f"{name}: {status} {data[-500:]!r}")
                    spent.append((c1 - c0, p1 - p0))
                if rep:  # the first pair is a warm-up
                    loop.append((spent[1][0] - spent[0][0]) / (sizes[1] - sizes[0]) * 1e6)
                    whole.append((spent[1][1] - spent[0][1]) / (sizes[1] - sizes[0]) * 1e6)
            out[name] = (statistics.median(loop), statistics.median(whole))
            print(f"http    {name:12} {out[name][0]:7.1f} µs a token on the event loop's thread, {out[name][1]:7.1f} "
                  f"in the whole process  ({sizes[0]} and {sizes[1]} tokens)", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["machine", "http", "both"], default="both")
    p.add_argument("--protocols", default="chat,completions,responses,anthropic,ollama")
    p.add_argument("--tokens", type=int, default=4000, help="machine mode: TextDelta events per run")
    p.add_argument("--http-tokens", type=int, default=400, help="http mode: pieces in the long answer (the short "
                   "one has a twentieth)")
    p.add_argument("--delay-ms", type=int, default=3, help="http mode: the scripted backend's wait before each token")
    p.add_argument("--reps", type=int, default=5, help="runs (machine) / requests (http) per protocol; the median")
    p.add_argument("--serve-args", default="--stream-interval 0", help="http mode: more arguments for tinytitan serve "
                   "(by default each token is its own chunk; '' measures the shipped 50 ms batches)")
    p.add_argument("--profile", metavar="FILE", help="machine mode: cProfile of its runs in FILE")
    a = p.parse_args()
    if a.mode in ("machine", "both"):
        machine_mode(a)
    if a.mode in ("http", "both"):
        http_mode(a)
