"""A request that arrives once the server has begun to stop (Ctrl-C, SIGTERM: the engine's wind_down) is refused
before anything is sent: 503 ``server_shutting_down`` in its protocol's envelope, streamed or not, as a folded
answer in flight gets it — never a 200 whose body ends in an error. Compaction's summary passes are refused
alike, and a memory consolidation pass begun then is cut short, its transcript kept for the next start."""

from __future__ import annotations

import logging

import httpx
import pytest
import trio

import strict
from sse import parse_sse
from memory_helpers import ANSWER, config, converse, memory_server, the_repo

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]
ANTHROPIC = {"anthropic-version": "2023-06-01"}
HISTORY = [{"role": "user", "content": "Build the parser."}, {"role": "assistant", "content": "Done: parser.py."}]
ROUTES = {  # name: (path, body); each streamed and not
    "chat": ("/v1/chat/completions", {"messages": USER}),
    "completions": ("/v1/completions", {"prompt": "hi"}),
    "responses": ("/v1/responses", {"input": "hi"}),
    "compaction_turn": ("/v1/responses", {"input": HISTORY + [{"type": "compaction_trigger"}]}),
    "messages": ("/v1/messages", {"messages": USER, "max_tokens": 10}),
    "ollama_chat": ("/api/chat", {"messages": USER}),
    "ollama_generate": ("/api/generate", {"prompt": "hi"}),
}


def shutting_down(name: str, r: httpx.Response) -> None:
    assert r.status_code == 503 and r.headers["content-type"].startswith("application/json"), (name, r.text)
    body = r.json()
    if name.startswith("ollama"):
        assert set(body) == {"error"} and "shutting down" in body["error"], (name, body)
    elif name == "messages":
        assert body["type"] == "error" and body["error"]["type"] == "api_error", (name, body)
        assert "shutting down" in body["error"]["message"], (name, body)
    else:
        assert body["error"]["code"] == "server_shutting_down", (name, body)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_request_after_shutdown_began_is_a_503_in_its_envelope(serve, stream):
    s = await serve(["never"])
    await s.engine.wind_down(0)
    async with httpx.AsyncClient(timeout=30) as h:
        for name, (path, body) in ROUTES.items():
            r = await h.post(s.url(path), json={"model": MODEL, "stream": stream, **body}, headers=ANTHROPIC)
            shutting_down(name, r)
        r = await h.post(s.url("/v1/responses/compact"), json={"model": MODEL, "input": HISTORY})
        shutting_down("compact", r)


def transcripts(s) -> list[tuple[str, float]]:
    """The transcripts waiting for a consolidation pass, each with the time it was written."""
    return s.engine.memory.db.run(lambda tx: tx.rows("SELECT transcript, at FROM memory_transcripts"))


async def test_a_consolidation_pass_begun_after_shutdown_keeps_its_transcript(tmp_path, demo_tok, caplog):
    """The pass the server refuses (it stopped before the workspace went quiet) is cut short as one it stopped
    mid-way is: its transcript waits for the next start, and no failure is logged."""
    caplog.set_level(logging.WARNING, "tinytitan.memory")
    cfg = config(tmp_path, consolidate=0.3)
    async with memory_server(demo_tok, [ANSWER, "build/command: never written"], cfg) as s:
        await converse(s, "chat", stream=False)
        (_, kept_at), = transcripts(s)  # the conversation's, waiting for its pass
        await s.engine.wind_down(0)
        with trio.fail_after(20):  # the pass takes the transcript, is refused, and writes it back: at a later time
            while not [at for _, at in transcripts(s) if at > kept_at]:
                await trio.sleep(0.02)
        rows = transcripts(s)
        assert len(rows) == 1 and ANSWER in rows[0][0], rows
        assert s.engine.consolidator.passes == 0 and the_repo(cfg).get("build/command") is None
    assert not [r for r in caplog.records if "consolidation" in r.getMessage()], caplog.text


async def test_a_summary_pass_the_server_stops_ends_the_compaction_not_a_fallback(serve, demo_tok):
    """A compaction whose summary pass the server stops mid-way is that 503 (in band once its stream is open),
    not a failed pass whose fallback (the transcript's newest text) is answered as the summary."""
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    long = " ".join(f"word{i}" for i in range(400))
    got: dict = {}

    async def ask(s, name: str, path: str, body: dict) -> None:
        async with httpx.AsyncClient(timeout=30) as h:
            got[name] = await h.post(s.url(path), json={"model": MODEL, **body})

    with trio.fail_after(30):
        for name, path, body in (("compact", "/v1/responses/compact", {"input": HISTORY}),
                                 ("turn", "/v1/responses", {"input": HISTORY + [{"type": "compaction_trigger"}],
                                                            "stream": True})):
            s = await serve(backend=ScriptedBackend([ScriptEntry(long, delay_ms=20)], demo_tok))
            async with trio.open_nursery() as n:
                n.start_soon(ask, s, name, path, body)
                while not s.engine.running:  # its summary pass is decoding
                    await trio.sleep(0.01)
                await s.engine.wind_down(0)
    shutting_down("compact", got["compact"])
    turn = got["turn"]
    assert turn.status_code == 200 and "event: response.failed" in turn.text, turn.text
    assert "shutting down" in turn.text and "event: response.completed" not in turn.text, turn.text
    # said as a generation's own stream says it: the engine's words, once
    (error,) = [data["response"]["error"] for _, data in strict.sse_events("responses", parse_sse(turn.text))
                if data["type"] == "response.failed"]
    assert error == {"code": "server_error",
                     "message": "generation failed: the server is shutting down; retry once it is back"}, error
