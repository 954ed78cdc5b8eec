"""What the engine holds right now, as plain data: the one place the observers read engine state from
(the dashboard's live view and the metrics collector)."""

from __future__ import annotations

import time
from typing import Any


def engine_state(engine: Any) -> dict:
    models = []
    for model_id, backend in engine.backends.items():
        pc = getattr(backend, "prompt_cache", None)
        stats = pc.stats() if pc is not None else None
        if stats is not None:
            asked = stats["hits"] + stats.get("misses", 0)
            stats = dict(stats, misses=stats.get("misses", 0), hit_rate=stats["hits"] / asked if asked else None)
        models.append({
            "id": model_id,
            "resident": engine.resident == model_id and backend.loaded,
            "context_window": backend.context_window,
            "load_seconds": engine.load_seconds.get(model_id),
            "prompt_cache": stats,
        })
    return {
        "resident": engine.resident,
        "models": models,
        "queue": {"waiting": engine.waiting, "running": engine.running,
                  "batch": engine.batch_size, "max_batch": engine.max_batch,
                  "max_queue": engine.max_queue},
        "uptime_s": time.time() - engine.started_at,
    }
