#!/usr/bin/env python3
"""An agent's next turn before the engine: validating its body, and tokenizing its prompt.

**Validation** (in process, the Anthropic Messages table): a Claude Code-shaped body of ~100 KB (20 tools, 4
system blocks, 40 tool-using turns: 161 messages) validated by a fresh validator (every item new: what every turn
cost before the validator remembered the items it found valid) ÷ the next turn's body (one new turn) through the
validator that saw this one. Median of ``--reps`` each.

**Over HTTP** (``--http``): ``tinytitan serve`` on the demo model, the same body (its tool results shorter, to fit
the demo model's window: ~45 KB) growing by one turn per request
(``max_tokens`` 4, the prompt cache serving all but the new turn): per request, from the server's ``/profile``,
the first token, the time outside the engine's steps (HTTP, validation, the protocol machine), the prefill;
medians of the last ``--turns`` requests, and the time outside the engine (over the whole request, its 4 tokens
sent included) ÷ the first token.

**Tokenizing** (in process, on the demo model's tokenizer and chat template: a real Qwen-style tokenizer, its
weights play no part): an agent session of ``--turns`` turns over a long system prompt, every turn sending the whole
conversation again with the previous answer and a new user message. Each answer is stored in the prompt cache
as a generation would store it (the prompt's ids, then the answer's), so the next turn's ``prepare`` finds it.
Per turn: ``tokenize_s`` as ``prepare`` reports it (the splice of cached ids, the rest tokenized, the check that
the ids decode to the rendered prompt) and the time to tokenize the same rendered prompt whole; the ratio of
the two, the median over turns 2+.

**Looking the prompt up in the prompt cache** (``--lookups``, in process): a prompt cache full in memory (64
entries) over a disk cache of N files (written here: one-layer caches, each holding a different agent prompt
over one shared 2,000-token system prompt), and new prompts looked up as a request does: ``probe`` (while it is
prepared: the diagnosis of what it misses) and ``fetch`` (when its row opens: the disk's ``best`` first, then
memory); ms per request, median of ``--reps`` × 20 prompts, for N in ``--files``. ``--code DIR`` imports
tinytitan from another checkout (the same measurement before a change). With ``--http`` too: ``tinytitan serve``
on the demo model over a prompt-cache directory it first fills with the last of ``--files`` short requests
(one file each), then ``--turns`` × 5 new short requests (the first five not counted): the first token at the
client, and from ``/profile`` prepare's tokenize time and the time outside the engine's steps, medians;
``--tinytitan-entry SCRIPT`` adds a second server started from that script on the same directory, the two
measured in turn, three times, the order swapped each time (a before/after).

Variants:
- ``thinking-off``: ``reasoning: false``: the template writes an empty thinking block into the generation prompt
  that the same turn, once in the history, does not have: the cached prompt matches all but its last characters.
- ``answer-back``: reasoning left to the template (none here): the cached prompt matches whole and the answer
  comes back as generated (its ids spliced in).

    python tools/bench_prepare.py                      # 8 turns, 3 repetitions: a few seconds
    python tools/bench_prepare.py --turns 12 --reps 5
    python tools/bench_prepare.py --http               # also over HTTP: a server on the demo model, ~1 min
    python tools/bench_prepare.py --lookups --files 100,1000,4000   # writes that many small files: minutes
    python tools/bench_prepare.py --lookups --http --files 1500     # over HTTP: ~2 min
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

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


def agent_body(turns: int = 40, result_lines: int = 200) -> dict:
    """Shaped like a Claude Code request: tools with input schemas, system blocks, tool_use / tool_result turns."""
    schema = {"type": "object", "properties": {"file_path": {"type": "string", "description": "absolute path"},
                                               "offset": {"type": "integer"}, "limit": {"type": "integer"}},
              "required": ["file_path"], "additionalProperties": False}
    tools = [{"name": f"{name}{k}", "description": f"{name}s a file. " * 20, "input_schema": schema}
             for k in range(5) for name in ("Read", "Edit", "Grep", "Bash")]
    messages = []
    for i in range(turns):
        messages += [
            {"role": "user", "content": [{"type": "text", "text": f"please look at file {i} " * 20}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Reading it."},
                                              {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "Read0",
                                               "input": {"file_path": f"/src/f{i}.py"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i:04d}",
                                          "content": "x = 1\n" * result_lines}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Done with {i}."}]}]
    messages.append({"role": "user", "content": "next"})
    system = [{"type": "text", "text": "You are Claude Code. " * 50}, {"type": "text", "text": "Be brief. " * 30},
              {"type": "text", "text": "Use the tools. " * 30, "cache_control": {"type": "ephemeral"}},
              {"type": "text", "text": "Environment: linux."}]
    return {"model": "m", "max_tokens": 64, "stream": True, "tools": tools, "system": system, "messages": messages}


def validation(reps: int) -> tuple[int, float, float]:
    """→ (body bytes, ms with a fresh validator, ms for the next turn through a validator that saw this one)."""
    import json

    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    body = agent_body()
    raw = json.dumps(body).encode()
    fresh, next_turn = [], []
    for rep in range(reps):
        proto = AnthropicMessages()
        started = time.perf_counter()
        proto.validate(raw)
        fresh.append(time.perf_counter() - started)
        body["messages"] += [{"role": "assistant", "content": f"answer {rep}"}, {"role": "user", "content": "more"}]
        later = json.dumps(body).encode()
        started = time.perf_counter()
        proto.validate(later)
        next_turn.append(time.perf_counter() - started)
    return len(raw), statistics.median(fresh) * 1000, statistics.median(next_turn) * 1000


def over_http(turns: int) -> dict:
    """Medians over ``turns`` requests of the growing agent body through ``tinytitan serve`` (see above)."""
    import tempfile

    from bench_common import ensure_model, start_tinytitan
    from bench_http import get_json, post_stream

    server = start_tinytitan(ensure_model("demo"), Path(tempfile.mkdtemp()), extra=["--prompt-lookup", "off"])
    try:
        body = dict(agent_body(result_lines=20), model=server.model_id, max_tokens=4)  # ~14k tokens: the window
        for turn in range(4 + turns):
            body["messages"] += [{"role": "assistant", "content": f"answer {turn}"},
                                 {"role": "user", "content": f"more {turn}"}]
            r = post_stream(server.port, "/v1/messages", body, {"anthropic-version": "2023-06-01"})
            if r.error:
                raise SystemExit(f"turn {turn}: {r.error}")
        rows = get_json(server.port, "/profile")["data"][-turns:]
    finally:
        server.stop()
    out = {k: statistics.median(r[k] for r in rows) * 1000 for k in ("ttft_s", "other_s", "prefill_s")}
    out["messages"] = len(body["messages"])
    out["share"] = statistics.median(r["other_s"] / r["ttft_s"] for r in rows)
    return out


def lookups(files: int, reps: int, rng: random.Random) -> tuple[float, float]:
    """→ ms per request for ``probe`` and for ``fetch`` (see the docstring)."""
    import tempfile

    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.cache.memory import PromptCache

    system = [rng.randrange(100, 30000) for _ in range(2000)]

    def prompt() -> list[int]:
        return system + [rng.randrange(100, 30000) for _ in range(200)]

    def kv(n: int) -> list:
        c = KVCache()
        c.update_and_fetch(mx.zeros((1, 1, n, 2)), mx.zeros((1, 1, n, 2)))
        return [c]

    directory = Path(tempfile.mkdtemp(prefix="tt-lookups-"))
    disk = PromptDisk(directory, [], lambda: "one-layer", max_bytes=1 << 40)
    for _ in range(files):  # (one at a time: a write waiting is replaced by a newer one of the same conversation)
        t = prompt()
        disk.put(np.asarray(t, dtype=np.int64), kv(len(t)), ())
        disk.flush(timeout=60)
    assert disk.stats()["entries"] == files, disk.stats()
    cache = PromptCache(1 << 40)
    cache.disk = PromptDisk(directory, [], lambda: "one-layer", max_bytes=1 << 40)  # read back as after a restart
    cache.disk.best(np.asarray(prompt(), dtype=np.int64))  # (waits for the directory's index)
    assert cache.disk.stats()["entries"] == files
    for _ in range(64):
        t = prompt()
        cache.store(t, None)  # memory full, nothing more written (no KV)
    probe, fetch = [], []
    for _ in range(reps * 20):
        t = prompt()
        started = time.perf_counter()
        cache.probe(t)
        probe.append(time.perf_counter() - started)
        started = time.perf_counter()
        cache.fetch(t)
        fetch.append(time.perf_counter() - started)
    shutil.rmtree(directory, ignore_errors=True)
    return statistics.median(probe) * 1000, statistics.median(fetch) * 1000


def lookups_http(files: int, turns: int, entry: str | None) -> list[tuple[str, float, float, float]]:
    """→ per server measured (side, first token ms, tokenize ms, outside the engine ms); see the docstring."""
    import tempfile

    from bench_common import ensure_model, start_tinytitan
    from bench_http import get_json, post_stream

    words = (ROOT / "README.md").read_text().split()
    log_dir, directory = Path(tempfile.mkdtemp()), tempfile.mkdtemp(prefix="tt-lookups-http-")

    def ask(server, seed: int):
        rng = random.Random(seed)
        text = f"{seed} " + " ".join(rng.choice(words) for _ in range(60))  # ~100 tokens: over a file's minimum
        body = {"model": server.model_id, "stream": True, "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "user", "content": text}]}
        r = post_stream(server.port, "/v1/chat/completions", body)
        if r.error:
            raise SystemExit(r.error)
        return r

    def drained(server) -> None:
        for _ in range(600):
            caches = get_json(server.port, "/health")["prompt_cache"].values()
            if all(c["disk_pending"] == 0 for c in caches):
                return
            time.sleep(0.1)

    def serve(script: str | None):
        return start_tinytitan(ensure_model("demo"), log_dir, entry=script,
                               extra=["--prompt-lookup", "off", "--prompt-cache-dir", directory])

    server = serve(None)
    try:
        for i in range(files):
            ask(server, 10 ** 6 + i)
        drained(server)
    finally:
        server.stop()
    rows, seed = [], 10 ** 7
    try:
        sides = [("this checkout", None)] + ([(f"`{entry}`", entry)] if entry else [])
        for round_ in range(3 if entry else 1):
            for side, script in sides if round_ % 2 == 0 else sides[::-1]:
                server = serve(script)
                try:
                    firsts = []
                    for i in range(turns * 5):
                        seed += 1
                        r = ask(server, seed)
                        firsts.append((r.t_first - r.t_send) * 1000)
                    drained(server)
                    done = get_json(server.port, "/profile")["data"][-(turns * 5 - 5):]
                finally:
                    server.stop()
                rows.append((side, statistics.median(firsts[5:]),
                             statistics.median(d["tokenize_s"] for d in done) * 1000,
                             statistics.median(d["other_s"] for d in done) * 1000))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--http", action="store_true", help="also over HTTP: tinytitan serve on the demo model")
    ap.add_argument("--lookups", action="store_true", help="only the prompt cache's lookups, over disk caches of "
                    "--files files")
    ap.add_argument("--files", default="100,1000,4000")
    ap.add_argument("--code", help="import tinytitan from this checkout (a before/after)")
    ap.add_argument("--tinytitan-entry", metavar="SCRIPT", help="with --lookups --http: a second server started "
                    "from this script (a before/after)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve() if args.code else ROOT))
    if args.lookups:
        print(f"{utc_now()} · {machine_line()} · {args.code or 'this checkout'}\n")
        print("| files on disk | probe ms | fetch ms |")
        print("|--:|--:|--:|")
        for n in [int(x) for x in args.files.split(",")]:
            probe, fetch = lookups(n, args.reps, random.Random(n))
            print(f"| {n} | {probe:.3f} | {fetch:.3f} |", flush=True)
        if args.http:
            n = int(args.files.split(",")[-1])
            print(f"\n| over HTTP, demo model, {n} files on disk | first token ms (client) | prepare's tokenize ms "
                  "| outside the engine ms |")
            print("|:--|--:|--:|--:|")
            for side, first, tokenize, other in lookups_http(n, args.turns, args.tinytitan_entry):
                print(f"| {side} | {first:.1f} | {tokenize:.2f} | {other:.2f} |", flush=True)
        return
    from tinytitan.demo_model import demo_model_id, ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend

    print(f"{utc_now()} · {machine_line()} · demo tokenizer, {args.turns} turns, {args.reps} repetitions\n")
    size, fresh, next_turn = validation(max(args.reps, 5))
    print("| validating a Claude Code-shaped body | body | fresh validator ms | next turn, items remembered ms "
          "| ratio |")
    print("|:--|--:|--:|--:|--:|")
    print(f"| 161 messages, 20 tools | {size // 1024} KB | {fresh:.1f} | {next_turn:.1f} | {next_turn / fresh:.2f} |\n")
    if args.http:
        h = over_http(args.turns)
        print("| over HTTP, the body growing a turn a request | messages (last) | first token ms | outside the engine ms (whole request) "
              "| prefill ms | outside ÷ first token |")
        print("|:--|--:|--:|--:|--:|--:|")
        print(f"| `/v1/messages`, demo model, 4 tokens | {h['messages']} | {h['ttft_s']:.1f} | {h['other_s']:.1f} "
              f"| {h['prefill_s']:.1f} | {h['share']:.2f} |\n")
    backend = MLXBackend(ensure_demo_model(), demo_model_id())
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
