"""Drafted tokens past a stop string: the turn's accepted count (the dashboard, /profile and /metrics read it)
counts only tokens that were generated — "each also counted once as generated" (events.Timing) — never the
accepted draft tokens a stop string cut off."""

from __future__ import annotations

import dataclasses

from batching_helpers import req, run
from speculative_helpers import COPY_TEXT


async def test_accepted_draft_tokens_past_a_stop_string_are_not_counted(demo_backend):
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.speculative.speculator import SpeculativeConfig
    from tinytitan.events import Finished

    # the model drafting for itself: every drafted token is accepted, 16 at a time
    drafting = MLXBackend(demo_backend.path, demo_backend.model_id,
                          speculative=SpeculativeConfig(lookup=False, draft_model=demo_backend.path,
                                                        num_draft_tokens=16))
    engine = Engine(drafting, max_batch=4)
    r = req("Show this again, exactly:\n" + COPY_TEXT, max_tokens=40)
    whole = await run(engine, r)
    text = "".join(getattr(ev, "text", "") for ev in whole)
    stopped = await run(engine, dataclasses.replace(r, stop=(text[3:6],)))  # a stop inside the first draft
    done = stopped[-1]
    assert isinstance(done, Finished) and done.reason == "stop_sequence"
    assert done.usage.completion_tokens < 16
    assert done.timing.draft_tokens > 0
    assert done.timing.draft_accepted_tokens <= done.usage.completion_tokens, (
        done.timing.draft_accepted_tokens, done.usage.completion_tokens)


async def test_metrics_never_count_more_accepted_draft_tokens_than_were_generated(serve, demo_backend):
    """Over HTTP: a stop string inside an accepted draft; /metrics' accepted count stays within usage."""
    import re

    import httpx

    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.speculative.speculator import SpeculativeConfig

    drafting = MLXBackend(demo_backend.path, demo_backend.model_id,
                          speculative=SpeculativeConfig(lookup=False, draft_model=demo_backend.path,
                                                        num_draft_tokens=16))
    s = await serve(backend=drafting)
    body = {"model": drafting.model_id, "max_tokens": 40, "temperature": 0, "reasoning_effort": "none",
            "messages": [{"role": "user", "content": "Show this again, exactly:\n" + COPY_TEXT}]}
    async with httpx.AsyncClient() as c:
        whole = (await c.post(s.url("/v1/chat/completions"), json=body)).json()
        text = whole["choices"][0]["message"]["content"]
        r = await c.post(s.url("/v1/chat/completions"), json={**body, "stop": [text[3:6]]})
        assert r.status_code == 200
        got = r.json()
        assert got["choices"][0]["finish_reason"] == "stop"
        metrics = (await c.get(s.url("/metrics"))).text
    accepted = float(re.search(r'tinytitan_draft_tokens_total\{kind="accepted"[^}]*\} (\S+)', metrics).group(1))
    generated = whole["usage"]["completion_tokens"] + got["usage"]["completion_tokens"]
    assert accepted <= generated, (accepted, generated)
