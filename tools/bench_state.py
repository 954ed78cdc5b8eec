#!/usr/bin/env python3
"""The state database: stored-response writes and reads at scale, memory recall, start time.

1. **Responses at N stored** (``--sizes``, default 10k and 100k): a SQLite store is filled with N Codex-sized
   responses (input items, an event log, an output message), then timed: ``put`` (one transaction, on disk
   before it returns), ``get`` (GET /v1/responses/{id}), ``chain`` (a previous_response_id replay of 20 turns)
   and an ``input_items`` page, each over ``--ops`` random ids (median and p99, ms).
2. **Start time** with N stored: opening the database (schema check, retention query) ÷ what the older store
   did at start — read the JSON-lines log and replay every record into memory.
3. **Memory recall at ``--records``** (default 10k) records of one workspace: the full-text query (FTS5, ranked)
   ÷ the older linear scan (every record's key, tags and value searched for every word, then sorted), median
   over a set of queries.

SQLite here (stdlib sqlite3 and its FTS5); ``--state postgresql://…`` runs parts 1 and 3 against PostgreSQL.

    python tools/bench_state.py                       # 10k and 100k responses, 10k records: a few minutes
    python tools/bench_state.py --sizes 2000 --records 2000 --ops 50      # a quick look
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tinytitan.memory.records import Record  # noqa: E402
from tinytitan.memory.workspace import Workspace, tags_text, words_of  # noqa: E402
from tinytitan.store import db as dbm  # noqa: E402
from tinytitan.store.legacy import read_log  # noqa: E402
from tinytitan.store.responses_store import ResponsesStore, StoredResponse, _chain, _get, _input_page  # noqa: E402

WORDS = ("build test cache parser decode prefill grammar socket token batch model server schema retry docs "
         "release config memory journal index layout thread queue router stream agent codex claude tool").split()


def vocabulary(n: int = 4000) -> list[str]:
    """Words as a codebase's notes have them: a few common, most rare (a fixed seed)."""
    rng = random.Random(0)
    syllables = "ka ri to mu se la po ne vi da go bu fe zi ho".split()
    made = {"".join(rng.choice(syllables) for _ in range(rng.randrange(2, 5))) for _ in range(n * 2)}
    return WORDS + sorted(made)[: n - len(WORDS)]


VOCAB = vocabulary()


def note(rng: random.Random, n: int) -> str:
    """Skewed as text is: the first words of the vocabulary (the project's common terms) far more often than the
    rest (each of the 30 common words is about 0.7% of all words, the rarest about 0.002%)."""
    return " ".join(VOCAB[int(len(VOCAB) * rng.random() ** 3)] for _ in range(n))


def response(i: int, prev: str | None, rng: random.Random) -> StoredResponse:
    text = note(rng, 60)
    item_in = {"id": f"msg_in{i:07}", "type": "message", "role": "user",
               "content": [{"type": "input_text", "text": text}]}
    item_out = {"id": f"msg_out{i:07}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text[:300], "annotations": []}]}
    resp = {"id": f"resp_{i:07}", "object": "response", "created_at": 0, "status": "completed", "model": "m",
            "output": [item_out], "usage": {"input_tokens": 900, "output_tokens": 80, "total_tokens": 980}}
    events = [{"type": "response.created", "sequence_number": 0, "response": {**resp, "output": [],
                                                                               "status": "in_progress"}},
              {"type": "response.output_text.delta", "sequence_number": 1, "delta": text[:300]},
              {"type": "response.completed", "sequence_number": 2, "response": resp}]
    return StoredResponse(f"resp_{i:07}", [item_in], events, prev, int(time.time()))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def timed(fn, args_list) -> tuple[float, float]:
    out = []
    for args in args_list:
        t = time.perf_counter()
        fn(*args)
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out), pct(out, 0.99)


def fill(store: ResponsesStore, start: int, n: int, rng: random.Random, log=None) -> None:
    batch = 5000
    for lo in range(start, start + n, batch):
        recs = [response(i, f"resp_{i - 1:07}" if i % 20 else None, rng) for i in range(lo, min(lo + batch,
                                                                                                start + n))]

        def write(tx, recs=recs):
            for r in recs:
                store._put(tx, r)

        store.db.run(write)
        if log is not None:
            for r in recs:
                log.write(json.dumps({"op": "put", **r.__dict__}, separators=(",", ":")) + "\n")


def bench_responses(where: str, sizes: list[int], ops: int, tmp: Path) -> list[str]:
    rng = random.Random(1)
    rows = []
    store = ResponsesStore.open(where, max_age=None, max_bytes=None)
    have = 0
    log_path = tmp / "responses.jsonl"
    with open(log_path, "w") as log:
        for n in sizes:
            fill(store, have, n - have, rng, log if not dbm.is_url(where) else None)
            log.flush()
            have = n
            ids = [(f"resp_{rng.randrange(n):07}",) for _ in range(ops)]
            put_med, put_p99 = timed(lambda i: store.put_sync(response(i, None, rng)),
                                     [(n + 10_000_000 + k,) for k in range(ops)])
            get_med, get_p99 = timed(lambda rid: store.db.run(_get, rid, write=False), ids)
            chain_ids = [(f"resp_{rng.randrange(n // 20) * 20 + 19:07}",) for _ in range(ops)]
            chain_med, chain_p99 = timed(lambda rid: store.db.run(_chain, rid, write=False), chain_ids)
            page_med, page_p99 = timed(lambda rid: store.db.run(_input_page, rid, 20, "desc", None, None,
                                                                write=False), ids)
            start = ""
            if not dbm.is_url(where):
                t = time.perf_counter()
                ResponsesStore.open(where, max_age=30 * 86400, max_bytes=None).db.close()
                db_open = time.perf_counter() - t
                t = time.perf_counter()
                replayed = read_log(log_path)
                replay = time.perf_counter() - t
                assert len(replayed) == n
                start = f"{replay * 1000:.0f} ms ÷ {db_open * 1000:.1f} ms = {replay / db_open:.0f}×"
            rows.append(f"| {n:,} | {put_med:.2f} / {put_p99:.2f} | {get_med:.3f} / {get_p99:.3f} | "
                        f"{chain_med:.2f} / {chain_p99:.2f} | {page_med:.3f} / {page_p99:.3f} | {start} |")
            print(rows[-1], flush=True)
    store.db.close()
    return rows


_WORD = re.compile(r"[a-z0-9]+")


def old_scan(records: list[Record], text: str, limit: int = 10) -> list[Record]:
    """The older journal's search: every record, every word, then a sort (as it was)."""
    words = _WORD.findall(text.lower())
    scored = []
    for r in records:
        key, body, rtags = r.key.lower(), r.value.lower(), [t.lower() for t in r.tags]
        score = 0
        for w in words:
            score += 10 * (w in key) + 5 * any(w in t for t in rtags) + min(body.count(w), 3)
        if words and score == 0:
            continue
        scored.append((-score, -r.importance, r.created, r.key, r))
    return [s[-1] for s in sorted(scored, key=lambda s: s[:4])[:limit]]


def bench_memory(where: str, n: int) -> str:
    rng = random.Random(2)
    db = dbm.open_database(where)
    ws = Workspace(db, "tinytitan/bench/ws", "/src/bench")
    records = []
    now = time.time()
    for i in range(n):
        key = f"{rng.choice(VOCAB)}/{rng.choice(VOCAB)}-{i}"
        value = note(rng, rng.randrange(10, 80)) + f" fact{i}"
        records.append(Record(key, value, rng.randrange(1, 6), None, (rng.choice(VOCAB),), now + i, now + i))

    def write(tx):
        tx.exec("INSERT INTO memory_workspaces (scope, path, created) VALUES (?, ?, ?) ON CONFLICT (scope) DO NOTHING",
                (ws.scope, ws.path, now))
        for r in records:
            tx.exec("INSERT INTO memory_records (scope, key, words, value, importance, confidence, tags, created, "
                    "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (ws.scope, r.key, words_of(r.key), r.value,
                                                                    r.importance, None, tags_text(r.tags), r.created,
                                                                    r.updated))

    db.run(write)
    # from the project's common words (each in about a quarter of the records) to rare ones and an exact fact
    queries = ["parser", "cache layout", "codex tool retry", "release docs build", "prefill decode batch",
               VOCAB[400], f"{VOCAB[900]} {VOCAB[1500]}", VOCAB[2500], f"{VOCAB[3000]} parser", "fact1234"]
    fts = timed(lambda q: ws.search(q, limit=10), [(q,) for q in queries] * 3)[0]
    scan = timed(lambda q: old_scan(records, q), [(q,) for q in queries] * 3)[0]
    db.close()
    line = f"| {n:,} | {fts:.2f} | {scan:.1f} | {scan / fts:.0f}× |"
    print(line, flush=True)
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="stored responses to time at (comma-separated)")
    ap.add_argument("--ops", type=int, default=200, help="operations timed per figure")
    ap.add_argument("--records", type=int, default=10_000, help="memory records of the recall benchmark")
    ap.add_argument("--state", help="a postgresql:// URL (default: a SQLite file in a temporary directory)")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    print(f"state database: {'PostgreSQL' if args.state else f'SQLite {dbm.sqlite3.sqlite_version}'}")
    with tempfile.TemporaryDirectory(prefix="tt-bench-state-") as tmp:
        where = args.state or str(Path(tmp) / "responses")
        print("| stored | put ms (median / p99) | get ms | chain of 20 ms | input_items page ms | "
              "start: JSONL replay ÷ database open |")
        print("|---:|---:|---:|---:|---:|---|")
        bench_responses(where, sizes, args.ops, Path(tmp))
        print()
        print("| memory records | FTS recall ms (median) | older scan ms | scan ÷ FTS |")
        print("|---:|---:|---:|---:|")
        bench_memory(args.state or str(Path(tmp) / "memory"), args.records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
