"""A large memory (many records, each up to 64 KiB) is never read whole for a listing: ``memory_list`` reads the
records it shows, and a listing reads of each value only what its summary needs; what it shows is the same."""

from __future__ import annotations

import json
import tracemalloc

from memory_helpers import on_disk
from tinytitan.memory import tools
from tinytitan.memory.fragment import listing

BIG = 60 * 1024


def fill(tmp_path, n: int):
    ws = on_disk(tmp_path)

    def write(tx):
        for i in range(n):
            value = f"\n\n  fact {i:03d}: the summary line\n" + "x" * BIG
            tx.exec("INSERT INTO memory_records (scope, key, words, value, importance, confidence, tags, created, "
                    "updated) VALUES (?, ?, ?, ?, 3, NULL, '', ?, ?)",
                    (ws.scope, f"notes/k{i:03d}", "notes", value, i, i))
        tx.exec("INSERT INTO memory_workspaces (scope, path, created) VALUES (?, ?, 0)", (ws.scope, ws.path))

    ws.db.run(write)
    return ws


def peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_list_of_a_large_memory_reads_only_what_it_shows(tmp_path):
    ws = fill(tmp_path, 160)  # about 10 MB of values
    (text, ok), used = peak(lambda: tools.execute(ws, "memory_list", json.dumps({"prefix": "notes/"})))
    out = json.loads(text)
    assert ok and out["count"] == 160 and len(out["keys"]) == tools.MAX_LIST and "narrow the prefix" in out["note"]
    assert out["keys"][7]["summary"] == "fact 007: the summary line"
    assert used < 2 * 1024 * 1024, f"{used} bytes allocated to list {tools.MAX_LIST} keys"
    (lines, hidden), used = peak(lambda: listing(ws))
    assert len(lines) == 60 and hidden == 100 and lines[0] == "- notes/k000 (importance 3): fact 000: the summary line"
    assert used < 2 * 1024 * 1024, f"{used} bytes allocated for the fragment's listing"
    # a value read in full is still whole
    assert len(ws.get("notes/k001").value) > BIG
