"""Keeping a stream cut short is shielded from the cancellation that cut it, and bounded in time
(``base.CUT_RECORD_SECONDS``): a store that never answers (a PostgreSQL server gone silent mid-write) loses that
record, with a warning naming the response, and no longer holds the handler, nor the engine place its request
holds, for ever."""

from __future__ import annotations

import logging
import threading

import trio

from responses_helpers import LONG, MODEL, hang_up
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.protocols import base


async def test_a_store_that_never_answers_lets_a_cut_stream_go(serve, demo_tok, monkeypatch, caplog):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20)], demo_tok)
    s = await serve(backend=backend)
    monkeypatch.setattr(base, "CUT_RECORD_SECONDS", 0.5)
    db = s.server.protocols["openai_responses"].store().db
    real, writing, release = db.run, threading.Event(), threading.Event()

    def run(fn, *args, write=True):  # every write waits in its worker thread, as on a server that never answers
        if write:
            writing.set()
            release.wait(30)
        return real(fn, *args, write=write)

    monkeypatch.setattr(db, "run", run)
    caplog.set_level(logging.WARNING, "tinytitan.protocol")
    try:
        rid = await hang_up(s, {"model": MODEL, "input": "x", "stream": True}, "response.output_text.delta")
        with trio.fail_after(5):  # (hang_up saw the engine's place given back: the handler went on)
            while rid not in caplog.text:
                await trio.sleep(0.05)
        assert writing.is_set() and not release.is_set()  # the write is still waiting: the bound let it go
        [warning] = [r for r in caplog.records if rid in r.getMessage()]
        assert warning.levelno == logging.WARNING and "not kept" in warning.getMessage()
    finally:
        release.set()
