"""/profile: per-turn timings that add up to the wall time, and a window that keeps generations, not lookups or
refusals."""

from __future__ import annotations

import time

import httpx
import pytest
import trio

from observe_helpers import MODEL, client, eventually, scrape

STEPS = ("admission_wait_s", "load_s", "render_s", "tokenize_s", "prefill_s", "decode_s")


async def test_profile_parts_add_up_to_the_wall_time(serve):
    s = await serve([{"output": "word " * 60, "delay_ms": 25}])
    started = time.perf_counter()
    r = await client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}])
    wall = time.perf_counter() - started

    async def profiled():
        async with httpx.AsyncClient() as c:
            data = (await c.get(s.url("/profile"))).json()["data"]
        return data

    (entry,) = await eventually(profiled)
    assert entry["protocol"] == "openai_chat" and entry["model"] == MODEL and entry["status"] == 200
    assert entry["decode_tokens"] == r.usage.completion_tokens - 1
    assert entry["prefill_tokens"] == r.usage.prompt_tokens - entry["cached_tokens"]
    # Orderings the clock guarantees, whatever the machine's load: the server's parts lie inside its total,
    # and the scripted delays are a floor under decode. (The turn ends after its last byte is sent, so its
    # total may pass what the client waited: only a loose check that it is this request's time.)
    parts = sum(entry[k] or 0 for k in STEPS)
    assert parts <= entry["total_s"] + 1e-6, (parts, entry)
    assert 0.5 * wall <= entry["total_s"] <= 1.5 * wall, (wall, entry)
    assert entry["decode_s"] >= entry["decode_tokens"] * 0.025 * 0.99, entry
    # ...and the steps account for the time: what they leave (other_s, HTTP and sending) is under a quarter of
    # it (the README's figure; loose, so a loaded machine passes)
    assert entry["other_s"] <= 0.25 * entry["total_s"], entry
    assert 0 < entry["ttft_s"] < entry["total_s"]
    assert entry["tokens_per_second"] > 0


async def test_the_profile_times_the_grammar_mask_on_the_demo_model(serve, demo_backend):
    s = await serve(backend=demo_backend)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    await client(s).chat.completions.create(
        model=demo_backend.model_id, messages=[{"role": "user", "content": "ok?"}], max_tokens=12,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    await client(s).chat.completions.create(model=demo_backend.model_id, max_tokens=3,
                                            messages=[{"role": "user", "content": "ok?"}])

    async def profiled():
        async with httpx.AsyncClient() as c:
            data = (await c.get(s.url("/profile"))).json()["data"]
        return data if len(data) == 2 else None

    masked, plain = await eventually(profiled)
    assert masked["grammar_mask_s"] > 0 and plain["grammar_mask_s"] is None
    assert masked["grammar_mask_s"] < masked["prefill_s"] + masked["decode_s"]
    # the mask is a part of prefill and decode: other_s is what the steps leave, each step counted once
    for entry in (masked, plain):
        steps = sum(entry[k] or 0 for k in STEPS)
        assert entry["other_s"] == pytest.approx(max(entry["total_s"] - steps, 0.0), abs=1e-9), entry


async def test_shared_routes_stay_out_of_the_profile(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        for path in ("/health", "/v1/models", "/metrics"):
            assert (await c.get(s.url(path))).status_code == 200
        await trio.sleep(0.05)
        body = (await c.get(s.url("/profile"))).json()
    assert body["data"] == [] and body["window"] == 256


async def test_the_window_keeps_generations_not_lookups(serve):
    """An Ollama UI polling /api/tags, token counts and stored-response lookups stay out of the dashboard's
    table and /profile's window; a generation and a refused generation request are in it."""
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        for _ in range(3):
            assert (await c.get(s.url("/api/tags"))).status_code == 200
        assert (await c.get(s.url("/api/version"))).status_code == 200
        assert (await c.post(s.url("/v1/messages/count_tokens"), json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})).status_code == 200
        assert (await c.get(s.url("/v1/responses/resp_nope"))).status_code == 404
        assert (await c.post(s.url("/v1/chat/completions"), json={"model": MODEL})).status_code == 400
        r = await c.post(s.url("/v1/chat/completions"), json={"model": MODEL,
                                                              "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200

    async def kept():
        recent = s.server.observer.recent()
        return recent if len(recent) == 2 else None

    recent = await eventually(kept)
    assert recent, s.server.observer.recent()
    assert [(t["path"], t["status"]) for t in recent] == [("/v1/chat/completions", 400),
                                                          ("/v1/chat/completions", 200)]
    await trio.sleep(0.1)  # nothing else arrives
    assert len(s.server.observer.recent()) == 2


async def test_refused_requests_do_not_push_the_turns_out_of_the_profile(serve):
    """/profile is "the last 256 turns (requests that ran the model)": refused requests (kept for the dashboard)
    must not push a generation out of it."""
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/chat/completions"), json={"model": MODEL,
                                                              "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200
        for _ in range(256):
            assert (await c.post(s.url("/v1/chat/completions"), json={"model": MODEL})).status_code == 400
        route_400 = (("protocol", "openai_chat"), ("route", "/v1/chat/completions"), ("status", "400"))

        async def all_kept():  # (each refusal is in the window by the time /metrics counts it)
            return (await scrape(s)).get(("tinytitan_requests_total", route_400)) == 256

        assert await eventually(all_kept)
        data = (await c.get(s.url("/profile"))).json()["data"]
    assert len(data) == 1, len(data)
