"""Replaying recorded client traces (tests/traces, see its README.md): TRACES, the traces' directory; load_trace,
one trace's records in order; replay, one recorded request sent again to a server, less the headers that
belonged to the recording's own connection."""

from __future__ import annotations

import json
from pathlib import Path

import httpx


TRACES = Path(__file__).resolve().parent / "traces"

# not replayed: transport and credential headers (the recorded values are stale or redacted)
DROP_HEADERS = {"host", "content-length", "accept-encoding", "connection", "transfer-encoding",
                "authorization", "x-api-key", "proxy-authorization", "cookie"}


def load_trace(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1)), f"{path}: seq not 1..n"
    return records


async def replay(h: httpx.AsyncClient, s, record: dict, model: str) -> httpx.Response:
    """Send one recorded request to server ``s`` (body ``model`` → ``model``); the reply is read in full."""
    headers = {k: v for k, v in record["headers"].items() if k.lower() not in DROP_HEADERS}
    body = record["body"]
    if isinstance(body, dict):
        if "model" in body:
            body = {**body, "model": model}
        content = json.dumps(body).encode()
    elif isinstance(body, str):
        content = body.encode()
    else:
        content = None
    return await h.request(record["method"], s.url(record["path"]), params=record.get("query") or None,
                           headers=headers, content=content)
