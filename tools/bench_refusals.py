"""What refusing costs: huge prompts, and a full queue (not a test; run by hand, about a minute).

Starts ``tinytitan serve`` on the demo model (as shipped for 1–2, and with one decoding slot and one queue
place, ``--max-batch 1 --max-queue 1``, for 3) and measures, with a stdlib client on threads:

1. the time to refuse one 24–30 MB prompt as too long (sending it included), alone;
2. small requests (a one-token chat completion, one after another) while several such prompts are sent at once,
   against the same small requests on an idle server;
3. a full queue: two long generations hold the slot and the queue place, then a burst of Chat Completions
   (429) and Anthropic Messages (529) requests, several rounds; p50/p99 of the refusals' answer times;
4. the server's resident memory (VmRSS) before the huge prompts, right after them, and a few seconds later
   (after the heap trims that follow large bodies: at most one per 10 s).

    python tools/bench_refusals.py --huge 4 --rounds 4 --burst 20
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ensure_model, fmt, machine_line, start_tinytitan, table, utc_now  # noqa: E402

HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def post(port: int, path: str, body: bytes, timeout: float = 120) -> tuple[int, float, dict]:
    """(status, seconds from the first byte sent to the whole answer read, the JSON answer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers=HEADERS)
    resp = conn.getresponse()
    data = resp.read()
    took = time.perf_counter() - t0
    conn.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = {}
    return resp.status, took, answer


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def huge_body(model: str, mbytes: float) -> bytes:
    text = "word " * int(mbytes * 1e6 / 5)
    return json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": text}]}).encode()


def small_body(model: str) -> bytes:
    return json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).encode()


def smalls_during(port: int, model: str, seconds: float | None, stop: threading.Event | None = None) -> list[float]:
    """Small requests one after another, for ``seconds`` or until ``stop`` is set."""
    body, times = small_body(model), []
    t_end = time.monotonic() + (seconds or 1e9)
    while time.monotonic() < t_end and not (stop and stop.is_set()):
        status, took, _ = post(port, "/v1/chat/completions", body)
        assert status == 200, status
        times.append(took)
        time.sleep(0.05)
    return times


def long_stream(port: int, model: str, hold: threading.Event) -> None:
    """A streamed generation that holds its slot until ``hold`` is set (then the connection is dropped)."""
    body = json.dumps({"model": model, "max_tokens": 100000, "stream": True,
                       "messages": [{"role": "user", "content": "Tell a very long story."}]}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/chat/completions", body=body, headers=HEADERS)
    resp = conn.getresponse()
    while not hold.is_set() and resp.read1(256):
        pass
    conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--huge", type=int, default=4, help="huge prompts sent at once (default 4)")
    ap.add_argument("--rounds", type=int, default=4, help="full-queue rounds (default 4)")
    ap.add_argument("--burst", type=int, default=20, help="requests per full-queue round (default 20)")
    args = ap.parse_args()
    print(f"{utc_now()}  {machine_line()}")
    with tempfile.TemporaryDirectory() as tmp:
        server = start_tinytitan(ensure_model("demo"), Path(tmp))
        try:
            rows, notes = huge_prompts(server, args)
        finally:
            server.stop()
        server = start_tinytitan(ensure_model("demo"), Path(tmp), ["--max-batch", "1", "--max-queue", "1"])
        try:
            rows += full_queue(server, args)
        finally:
            server.stop()
    print(table(["what", "n", "p50 ms", "p99 ms", "max ms"], rows, align="lrrrr"))
    print("\n".join(notes))
    return 0


def ms(x: float) -> str:
    return fmt(1000 * x, ".0f")


def row(what: str, xs: list[float]) -> list:
    return [what, len(xs), ms(percentile(xs, .5)), ms(percentile(xs, .99)), ms(max(xs) if xs else float("nan"))]


def huge_prompts(server, args) -> tuple[list, list[str]]:
    port, model, pid = server.port, server.model_id, server.pid
    smalls_during(port, model, 1.0)  # warm: the model loaded, the first compile done
    idle = smalls_during(port, model, 3.0)
    rss = {"before": rss_mib(pid)}
    sizes = [24 + 6 * i / max(1, args.huge - 1) for i in range(args.huge)]
    bodies = [huge_body(model, mb) for mb in sizes]

    status, alone, answer = post(port, "/v1/chat/completions", bodies[-1])
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded", (status, answer)

    refusals: list[float] = []
    stop = threading.Event()
    during: list[float] = []

    def send(body):
        code, took, answer = post(port, "/v1/chat/completions", body)
        assert code == 400 and answer["error"]["code"] == "context_length_exceeded", (code, answer)
        refusals.append(took)

    senders = [threading.Thread(target=send, args=(b,)) for b in bodies]
    watcher = threading.Thread(target=lambda: during.extend(smalls_during(port, model, None, stop)))
    watcher.start()
    time.sleep(0.2)
    t0 = time.perf_counter()
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    all_refused = time.perf_counter() - t0
    stop.set()
    watcher.join()
    del bodies
    rss["right after"] = rss_mib(pid)
    time.sleep(3)
    rss["3 s later"] = rss_mib(pid)
    time.sleep(9)
    rss["12 s later"] = rss_mib(pid)
    rows = [row("refuse one huge prompt, alone", [alone]), row(f"refuse each of {args.huge} at once", refusals),
            row("small request, idle server", idle), row(f"small request, during the {args.huge}", during)]
    notes = [f"huge prompts: {args.huge} of {sizes[0]:.0f}–{sizes[-1]:.0f} MB, each refused 400 "
             f"context_length_exceeded; all {args.huge} within {all_refused:.2f} s",
             "server RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items())]
    return rows, notes


def full_queue(server, args) -> list:
    port, model = server.port, server.model_id
    smalls_during(port, model, 1.0)
    full: dict[int, list[float]] = {429: [], 529: []}
    other: list[int] = []
    for _ in range(args.rounds):
        hold = threading.Event()
        longs = [threading.Thread(target=long_stream, args=(port, model, hold)) for _ in range(2)]
        for t in longs:
            t.start()
            time.sleep(0.3)
        results: list[tuple[int, float]] = []

        def refused(path):
            code, took, _ = post(port, path, small_body(model))
            results.append((code, took))

        burst = [threading.Thread(target=refused, args=("/v1/chat/completions" if i % 2 else "/v1/messages",))
                 for i in range(args.burst)]
        for t in burst:
            t.start()
        for t in burst:
            t.join()
        hold.set()
        for t in longs:
            t.join()
        for code, took in results:
            (full[code].append(took) if code in full else other.append(code))
        time.sleep(0.5)

    if other:  # a long generation ended (the model's end token) before its round did
        print(f"full-queue answers other than 429/529: {sorted(other)}")
    return [row(f"full queue: {code} ({'Chat' if code == 429 else 'Messages'})", xs) for code, xs in full.items()]


if __name__ == "__main__":
    raise SystemExit(main())
