"""A server with memory (consolidation on, the default) stops cleanly: its background work is cancelled on the
event loop, not from the worker thread quart-trio runs a plain after_serving function in."""

from __future__ import annotations

import json
import signal

from cli_helpers import start


def test_a_server_with_memory_stops_cleanly(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(json.dumps(["Hi."]))
    proc, _, _, _ = start(["--script", str(script), "--memory", "--memory-dir", str(tmp_path / "m")])
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert "must be called from async context" not in out, out[-2500:]


def test_the_background_is_stopped_on_the_event_loop(tmp_path, demo_tok):
    """quart-trio runs a plain after_serving function in a worker thread, where trio's CancelScope.cancel()
    raises 'must be called from async context' (whenever the consolidation loop is still running)."""
    import inspect

    from memory_helpers import MODEL, config
    from tinytitan.engine.backends.scripted import ScriptedBackend
    from tinytitan.engine.engine import Engine
    from tinytitan.http.app import Server, ServerConfig
    from tinytitan.memory.layer import MemoryEngine
    from tinytitan.memory.service import Memory
    from tinytitan.protocols.registry import all_protocols
    from conftest import entries

    memory = Memory(config(tmp_path, consolidate=30))
    try:
        engine = MemoryEngine(Engine(ScriptedBackend(entries(["x"]), demo_tok, model_id=MODEL)), memory)
        server = Server(engine, all_protocols(), ServerConfig())
        assert all(inspect.iscoroutinefunction(f) for f in server.app.after_serving_funcs)
    finally:
        memory.close()
