"""Watching the server work: the request log line, /metrics (parsed by prometheus_client's own parser),
/profile (per-turn timings that add up to the wall time) and the model cards."""

from __future__ import annotations

import logging
import time

import anthropic
import httpx
import openai
import pytest
import trio
from anthropic.types import ModelInfo
from openai.types import Model
from prometheus_client.parser import text_string_to_metric_families

from tinytitan.engine.backends.scripted import SCRIPTED_CONTEXT_WINDOW
from tinytitan.observe.clients import client_name
from test_responses_context_management import INPUT, SUMMARY

MODEL = "tinytitan-scripted"
SECRET_PROMPT = "the launch code is swordfish"
ANSWER = "Paris is the capital of France, and it is lovely in spring."
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("read_file", "run_tests")]


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


async def eventually(check, timeout: float = 20.0):
    """The record of a request is final once its response is fully sent: a moment after the client has it, or,
    for a client that hung up, once the server has seen it go; on a busy machine either can take seconds."""
    deadline = trio.current_time() + timeout
    while True:
        result = await check()
        if result or trio.current_time() > deadline:
            return result
        await trio.sleep(0.02)


async def scrape(s) -> dict[tuple[str, tuple], float]:
    async with httpx.AsyncClient() as c:
        r = await c.get(s.url("/metrics"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(r.text) for sample in family.samples}


def tokens(samples, kind: str) -> float:
    return samples.get(("tinytitan_tokens_total", (("kind", kind), ("model", MODEL))), 0.0)


async def test_one_info_line_per_request_without_prompt_or_answer_text(serve, caplog):
    caplog.set_level(logging.DEBUG, logger="tinytitan.requests")
    s = await serve([ANSWER])
    r = await client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": SECRET_PROMPT}],
                                                tools=TOOLS)
    assert r.choices[0].message.content == ANSWER

    async def logged():
        return [rec for rec in caplog.records if rec.name == "tinytitan.requests" and rec.levelno == logging.INFO
                and "/v1/chat/completions" in rec.getMessage()]

    (line,) = await eventually(logged)
    text = line.getMessage()
    u = r.usage
    for part in ("POST /v1/chat/completions 200 openai_chat", f"model={MODEL}", f"prompt={u.prompt_tokens}",
                 f"cached={u.prompt_tokens_details.cached_tokens}", f"completion={u.completion_tokens}", "tools=2",
                 'client="openai-python"', "ua=\"AsyncOpenAI/Python", "ttft=", "duration="):
        assert part in text, (part, text)
    debug = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.DEBUG
             and rec.name == "tinytitan.requests"]
    assert any("read_file, run_tests" in m for m in debug)
    assert "read_file" not in text
    everything = "\n".join(rec.getMessage() for rec in caplog.records)
    assert SECRET_PROMPT not in everything and "capital of France" not in everything


async def test_metrics_counters_move_by_exactly_the_tokens_used(serve):
    s = await serve(["<think>\nLet me think about it.\n</think>\n\n" + ANSWER])
    before = await scrape(s)
    r = await client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}],
                                                stream=True, stream_options={"include_usage": True})
    usage = [chunk.usage async for chunk in r if chunk.usage][-1]
    route = (("protocol", "openai_chat"), ("route", "/v1/chat/completions"), ("status", "200"))

    async def moved():
        after = await scrape(s)
        return after if after.get(("tinytitan_requests_total", route), 0) == before.get(
            ("tinytitan_requests_total", route), 0) + 1 else None

    after = await eventually(moved)
    assert after, "the request was not counted"
    assert tokens(after, "prompt") - tokens(before, "prompt") == usage.prompt_tokens
    assert tokens(after, "cached") - tokens(before, "cached") == usage.prompt_tokens_details.cached_tokens
    assert tokens(after, "completion") - tokens(before, "completion") == usage.completion_tokens
    reasoning = usage.completion_tokens_details.reasoning_tokens
    assert reasoning > 0 and tokens(after, "reasoning") - tokens(before, "reasoning") == reasoning
    ttft = ("tinytitan_time_to_first_token_seconds_count", (("model", MODEL),))
    assert after[ttft] == before.get(ttft, 0) + 1
    assert after[("tinytitan_decode_tokens_per_second_count", (("model", MODEL),))] >= 1
    assert after[("tinytitan_queue_waiting", ())] == 0 and after[("tinytitan_queue_running", ())] == 0
    assert after[("tinytitan_model_resident", (("model", MODEL),))] == 1
    # an error is counted with its status, under the route it was sent to
    async with httpx.AsyncClient() as c:
        bad = await c.post(s.url("/v1/chat/completions"), json={"model": MODEL})
    assert bad.status_code == 400
    route_400 = (("protocol", "openai_chat"), ("route", "/v1/chat/completions"), ("status", "400"))
    assert await eventually(lambda: _has(s, ("tinytitan_requests_total", route_400)))


async def _has(s, key) -> bool:
    return key in await scrape(s)


async def test_metrics_show_the_prompt_cache(serve, demo_tok):
    from tinytitan.engine.cache.memory import PromptCache
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    backend = ScriptedBackend([ScriptEntry("Fine.")], demo_tok, model_id=MODEL, prompt_cache=PromptCache(1 << 20))
    s = await serve(backend=backend)
    messages = [{"role": "user", "content": "a question long enough to be worth caching"}]
    c = client(s)
    await c.chat.completions.create(model=MODEL, messages=messages)
    second = await c.chat.completions.create(model=MODEL, messages=messages)
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    after = await scrape(s)
    assert after[("tinytitan_prompt_cache_hits_total", (("model", MODEL),))] == 1
    assert after[("tinytitan_prompt_cache_misses_total", (("model", MODEL),))] == 1
    assert after[("tinytitan_prompt_cache_entries", (("model", MODEL),))] >= 1
    assert after[("tinytitan_prompt_cache_max_bytes", (("model", MODEL),))] == 1 << 20


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


STEPS = ("admission_wait_s", "load_s", "render_s", "tokenize_s", "prefill_s", "decode_s")


async def test_shared_routes_stay_out_of_the_profile(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        for path in ("/health", "/v1/models", "/metrics"):
            assert (await c.get(s.url(path))).status_code == 200
        await trio.sleep(0.05)
        body = (await c.get(s.url("/profile"))).json()
    assert body["data"] == [] and body["window"] == 256


async def test_model_cards_in_both_shapes(serve):
    s = await serve(["ok"])
    models = await client(s).models.list()
    (card,) = models.data
    Model.model_validate(card.model_dump())
    extra = card.model_extra
    assert extra["context_window"] == SCRIPTED_CONTEXT_WINDOW and extra["max_output_tokens"] == SCRIPTED_CONTEXT_WINDOW
    # the demo template renders tools and has an enable_thinking switch
    assert extra["capabilities"] == {"tools": True, "reasoning": True, "reasoning_levels": ["off", "on"],
                                     "structured_output": True}
    one = await client(s).models.retrieve(MODEL)
    assert one.model_extra["capabilities"] == extra["capabilities"]

    ac = anthropic.AsyncAnthropic(base_url=s.base, api_key="anything", max_retries=0)
    page = await ac.models.list()
    (info,) = page.data
    strict = ModelInfo.model_validate(info.model_dump(exclude_none=True))
    assert strict.max_input_tokens == SCRIPTED_CONTEXT_WINDOW and strict.max_tokens == SCRIPTED_CONTEXT_WINDOW
    assert strict.capabilities.thinking.supported and strict.capabilities.thinking.types.disabled.supported
    assert strict.capabilities.structured_outputs.supported and not strict.capabilities.image_input.supported
    retrieved = await ac.models.retrieve(MODEL)
    assert retrieved.max_input_tokens == SCRIPTED_CONTEXT_WINDOW


async def test_a_template_without_tools_or_thinking_says_so(serve, demo_tok):
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    class Plain:  # a tokenizer whose template renders neither tools nor thinking
        chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"

        def get_vocab(self):
            return {}

    backend = ScriptedBackend([ScriptEntry("ok")], Plain(), model_id="plain")
    card = backend.limits()
    assert card["features"] == {"tools": False, "reasoning": False, "reasoning_levels": [],
                                    "structured_output": True}


def test_client_names_from_user_agents():
    assert client_name("claude-cli/2.1.3 (external, cli)") == "Claude Code"
    assert client_name("codex_exec/0.72.0 (Debian 12; x86_64)") == "Codex"
    assert client_name("OpenAI/Python 1.99.0") == "openai-python"
    assert client_name("Anthropic/Python 0.60.0") == "anthropic-python"
    assert client_name("") == "unknown"
    assert client_name("SomeTool/3.2 (secret details)") == "SomeTool"


async def test_the_load_route_makes_a_model_resident(serve, demo_tok):
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    a, b = (ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=name) for name in ("alpha", "beta"))
    s = await serve(backend=[a, b])
    async with httpx.AsyncClient() as c:
        assert s.engine.resident == "alpha"
        r = await c.post(s.url("/v1/models/load"), json={"model": "beta"})
        assert r.status_code == 200 and r.json()["loaded"] == "beta" and s.engine.resident == "beta"
        samples = await scrape(s)
        assert samples[("tinytitan_model_resident", (("model", "beta"),))] == 1
        assert samples[("tinytitan_model_resident", (("model", "alpha"),))] == 0
        assert ("tinytitan_model_load_seconds", (("model", "beta"),)) in samples
        missing = await c.post(s.url("/v1/models/load"), json={"model": "gamma"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_compaction_passes_count_their_tokens(serve):
    """Codex's compactions run the model too: /v1/responses/compact and a compaction_trigger turn move the
    token counters by the usage they report, and the log line names the model."""
    s = await serve(["Requirements: fix app.py."])
    history = [{"type": "message", "role": "user", "content": "Fix the bug in app.py please."},
               {"type": "message", "role": "assistant", "content": "Looking at it."}]
    for path, body in (("/v1/responses/compact", {"input": history}),
                       ("/v1/responses", {"input": history + [{"type": "compaction_trigger"}], "store": False})):
        before = await scrape(s)
        async with httpx.AsyncClient() as c:
            r = await c.post(s.url(path), json={"model": MODEL, **body})
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0

        async def moved():
            after = await scrape(s)
            return after if tokens(after, "prompt") > tokens(before, "prompt") else None

        after = await eventually(moved)
        assert after, f"{path}: the compaction's tokens were not counted"
        assert tokens(after, "prompt") - tokens(before, "prompt") == usage["input_tokens"]
        assert tokens(after, "completion") - tokens(before, "completion") == usage["output_tokens"]


async def test_the_batch_size_is_the_generations_decoding_together(demo_backend):
    """With continuous batching, the queue figures say how many generations share the batch (not only how
    many hold a place), beside --max-batch; both in the engine state the dashboard draws and in /metrics."""
    from tinytitan.chat_request import ChatRequest, Message
    from tinytitan.engine.engine import Engine
    from tinytitan.observe.metrics import Metrics
    from tinytitan.observe.state import engine_state

    engine = Engine(demo_backend, max_batch=4)
    metrics = Metrics(engine)

    def gauge(name: str) -> float:
        (family,) = [f for f in text_string_to_metric_families(metrics.exposition().decode()) if f.name == name]
        return family.samples[0].value

    assert engine_state(engine)["queue"] == {"waiting": 0, "running": 0, "batch": 0, "max_batch": 4,
                                             "max_queue": engine.max_queue}
    assert gauge("tinytitan_batch_limit") == 4
    seen = []
    async with trio.open_nursery() as n:
        async def one(prompt):  # (greedy, each of these runs to its 2000-token cap on the demo model)
            req = ChatRequest(model=demo_backend.model_id, messages=(Message("user", prompt),),
                              max_tokens=2000, reasoning=False, temperature=0)
            async with engine.session(req) as events:
                async for _ in events:
                    if seen:  # all three were seen together: hang up
                        break

        for prompt in ("Count to 100.", "Count to 100 slowly.", "Count to 100, please."):
            n.start_soon(one, prompt)
        with trio.fail_after(60):
            while engine_state(engine)["queue"]["batch"] < 3:
                await trio.sleep(0.002)
        seen.append(gauge("tinytitan_batch_size"))
    assert seen == [3]
    with trio.fail_after(10):
        while engine.batch_size:
            await trio.sleep(0.01)
    assert engine_state(engine)["queue"]["batch"] == 0 and gauge("tinytitan_batch_size") == 0


async def test_a_path_cannot_write_a_log_line_of_its_own(serve, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve(["ok"])
    forged = "2026-01-01 00:00:00,000 INFO tinytitan.requests: GET /forged 200"
    async with httpx.AsyncClient() as c:
        r = await c.get(s.url("/v1/models/x%0A" + forged.replace(" ", "%20")))
    assert r.status_code == 404

    async def logged():
        return [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.requests" and "/v1/models/x"
                in rec.getMessage()]

    (line,) = await eventually(logged)
    assert "\n" not in line and "/v1/models/x\\n2026-01-01" in line


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


def counting(decoded: list[int], entries, tokenizer):
    """The scripted backend, appending to ``decoded`` how many tokens each generation decoded once it ends (cut
    short or not)."""
    from tinytitan.engine.backends.scripted import ScriptedBackend

    class Counting(ScriptedBackend):
        def decode(self, prepared, loop, should_stop):
            try:
                super().decode(prepared, loop, should_stop)
            finally:
                decoded.append(loop.completion_tokens)

    return Counting(entries, tokenizer, model_id=MODEL)


async def test_a_cancelled_stream_counts_the_tokens_it_decoded(serve, demo_tok):
    """A client that hangs up mid-stream (Esc in a coding agent) still used the tokens decoded for it: the
    counters move by the prompt and by exactly what the engine decoded before it stopped."""
    from tinytitan.engine.backends.scripted import ScriptEntry

    decoded: list[int] = []
    s = await serve(backend=counting(decoded, [ScriptEntry("word " * 400, delay_ms=10)], demo_tok))
    before = await scrape(s)
    async with httpx.AsyncClient() as c:
        async with c.stream("POST", s.url("/v1/chat/completions"), json={
                "model": MODEL, "stream": True, "messages": [{"role": "user", "content": "talk"}]}) as r:
            lines = 0
            async for line in r.aiter_lines():
                lines += line.startswith("data: ")
                if lines >= 5:
                    break  # hang up

    async def moved():
        after = await scrape(s)
        return after if tokens(after, "completion") > tokens(before, "completion") else None

    after = await eventually(moved)
    assert after and decoded, "the cancelled stream's tokens were not counted"
    (n,) = decoded
    assert 0 < n < 400 and tokens(after, "completion") - tokens(before, "completion") == n
    assert tokens(after, "prompt") > tokens(before, "prompt")
    (turn,) = s.server.observer.recent()
    assert turn["stop_reason"] == "cancelled" and turn["completion_tokens"] == n


async def test_the_route_is_the_frameworks_own_match(serve):
    """A request's route and protocol are the rule the framework matched it to (a path template, however many
    paths it stands for), not a second match of the URL map; no route (404, 405) is "unmatched"."""
    s = await serve(["ok"])
    observer = s.server.observer
    matched_again = []
    own_match = observer._route
    observer._route = lambda method, path: matched_again.append(path) or own_match(method, path)
    before = await scrape(s)
    async with httpx.AsyncClient() as c:
        for name in ("one", "two/three"):
            assert (await c.get(s.url(f"/v1/models/{name}"))).status_code == 404  # matched; no such model
        assert (await c.get(s.url("/v1/no/such/route"))).status_code == 404
        assert (await c.delete(s.url("/v1/chat/completions"))).status_code == 405
        assert (await c.post(s.url("/v1/chat/completions"), json={"model": MODEL})).status_code == 400

    def moved(after, labels, by):
        key = ("tinytitan_requests_total", tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0) == by

    async def counted():
        after = await scrape(s)
        return all(moved(after, labels, by) for labels, by in (
            ({"protocol": "shared", "route": "/v1/models/<path:model_id>", "status": "404"}, 2),
            ({"protocol": "none", "route": "unmatched", "status": "404"}, 1),
            ({"protocol": "none", "route": "unmatched", "status": "405"}, 1),
            ({"protocol": "openai_chat", "route": "/v1/chat/completions", "status": "400"}, 1)))

    assert await eventually(counted)
    assert matched_again == []
    (refused,) = observer.recent()
    assert (refused["route"], refused["protocol"], refused["status"]) == ("/v1/chat/completions", "openai_chat", 400)


async def test_a_client_that_hangs_up_before_its_body_is_sent_is_no_server_error(serve):
    """A POST that sends 8 of its 100 bytes and closes: nothing failed here, so it is counted as 499 (the client
    left), never as a 500 that a 5xx alert would fire on."""
    s = await serve(["ok"])
    host, port = s.url("").split("//")[1].split("/")[0].split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                          b"\r\nContent-Length: 100\r\n\r\n{\"model\"")
    await stream.aclose()
    left = (("protocol", "openai_chat"), ("route", "/v1/chat/completions"), ("status", "499"))
    assert await eventually(lambda: _has(s, ("tinytitan_requests_total", left)))
    assert not [k for k in await scrape(s) if k[0] == "tinytitan_requests_total" and ("status", "500") in k[1]]


def test_the_prompt_cache_on_disk_is_in_the_metrics(demo_tok, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.cache.memory import PromptCache
    from tinytitan.engine.engine import Engine
    from tinytitan.observe.metrics import Metrics

    cache = PromptCache(1 << 20)
    cache.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    engine = Engine(ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=MODEL, prompt_cache=cache))
    names = {f.name for f in text_string_to_metric_families(Metrics(engine).exposition().decode())}
    assert "tinytitan_prompt_cache_entries" in names
    assert {"tinytitan_prompt_cache_disk_bytes", "tinytitan_prompt_cache_disk_entries"} <= names, sorted(names)


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


TRACE = {"id": "trace-1", "metadata": {"source_path": "/tmp/rollout.jsonl"},
         "items": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]}]}


async def test_trace_summarize_counts_the_tokens_of_every_trace(serve):
    """Codex's memories summarise several traces in one request: every trace's passes are counted."""
    s = await serve(["Summary."] * 6)
    deltas = []
    for traces in ([TRACE], [TRACE, {**TRACE, "id": "trace-2"}]):
        before = await scrape(s)
        async with httpx.AsyncClient() as c:
            r = await c.post(s.url("/v1/memories/trace_summarize"), json={"model": MODEL, "traces": traces})
        assert r.status_code == 200, r.text

        async def moved():
            after = await scrape(s)
            return after if tokens(after, "prompt") > tokens(before, "prompt") else None

        after = await eventually(moved)
        deltas.append((tokens(after, "prompt") - tokens(before, "prompt"),
                       tokens(after, "completion") - tokens(before, "completion")))
    one, two = deltas
    assert two == (2 * one[0], 2 * one[1]), deltas


async def test_a_turn_compacted_on_the_way_counts_its_summary_pass(serve, demo_tok):
    """A Responses turn under context_management compacts before it answers: the summary pass's tokens are
    counted with the reply's, as /v1/responses/compact counts its passes."""
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry(SUMMARY), ScriptEntry("Running them now.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    before = await scrape(s)
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/responses"), json=dict(
            model=MODEL, input=INPUT, store=False,
            context_management=[{"type": "compaction", "compact_threshold": 20}]))
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]

    async def moved():
        after = await scrape(s)
        return after if tokens(after, "prompt") > tokens(before, "prompt") else None

    after = await eventually(moved)
    summary_prompt, _ = backend.prompts
    summary_pass = len(demo_tok.encode(summary_prompt, add_special_tokens=False))
    counted = tokens(after, "prompt") - tokens(before, "prompt")
    # the model read the summary pass's prompt too: the counter moves by it and the reply's own prompt
    assert counted == usage["input_tokens"] + summary_pass, (counted, usage, summary_pass)


async def _compacted_stream(s, lines_before_leaving: int | None = None) -> dict | None:
    """A streamed Responses turn under context_management that compacts first; the client leaves after that
    many text deltas (None: it reads to the end). The completed response's usage, when it got that far."""
    import json

    async with httpx.AsyncClient() as c:
        async with c.stream("POST", s.url("/v1/responses"), json=dict(
                model=MODEL, input=INPUT, store=False, stream=True,
                context_management=[{"type": "compaction", "compact_threshold": 20}])) as r:
            deltas = 0
            async for line in r.aiter_lines():
                deltas += '"response.output_text.delta"' in line
                if lines_before_leaving is not None and deltas >= lines_before_leaving:
                    return None
                if line.startswith("data: ") and '"response.completed"' in line:
                    return json.loads(line[6:])["response"]["usage"]
    return None


async def test_a_streamed_compacted_turn_counts_its_summary_pass_once(serve, demo_tok):
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry(SUMMARY), ScriptEntry("Running them now.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    before = await scrape(s)
    usage = await _compacted_stream(s)

    async def moved():
        after = await scrape(s)
        return after if tokens(after, "prompt") > tokens(before, "prompt") else None

    after = await eventually(moved)
    summary_pass = len(demo_tok.encode(backend.prompts[0], add_special_tokens=False))
    assert tokens(after, "prompt") - tokens(before, "prompt") == usage["input_tokens"] + summary_pass


async def test_a_compacted_turn_the_client_leaves_counts_its_summary_and_what_the_reply_decoded(serve, demo_tok):
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry(SUMMARY), ScriptEntry("word " * 400, delay_ms=10)], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    summary = len(demo_tok.encode(SUMMARY, add_special_tokens=False))
    await _compacted_stream(s, lines_before_leaving=5)

    async def ended():
        turns = s.server.observer.recent()
        return turns if turns and turns[0]["stop_reason"] == "cancelled" else None

    (turn,) = await eventually(ended)
    assert turn["completion_tokens"] > summary  # the summary's, and the reply's decoded before the hang-up



class _Session:
    """An engine session that read a prompt of ``prompt_tokens`` and decoded ``decoded`` (completion, reasoning),
    its events never read (its client left)."""

    def __init__(self, prompt_tokens: int, decoded: tuple[int, int]):
        self.prompt_tokens, self.decoded = prompt_tokens, decoded

    def __aiter__(self):
        return self


@pytest.mark.parametrize("began", [False, True])
def test_choices_left_unfinished_count_whether_or_not_the_first_had_started(began):
    """Several choices, the client gone: what the others decoded counts (their prompts where theirs count), also
    where the first never started (still reading its prompt while another prompt's choices decoded)."""
    from types import SimpleNamespace

    from tinytitan.events import Started
    from tinytitan.observe.turn import Turn, beside, current_turn, watch

    turn = Turn("POST", "/v1/completions", "127.0.0.1", "test")
    token = current_turn.set(turn)
    try:
        watch(_Session(7, (2, 0)), SimpleNamespace(model="m", tools=()), stream=True)
        beside(_Session(5, (3, 1)), prompt=True)  # another prompt's first choice
        beside(_Session(5, (4, 0)), prompt=False)  # that prompt's second: its prompt counted once
    finally:
        current_turn.reset(token)
    if began:
        turn.see(Started(7))
    turn.cancelled()
    turn.count_unfinished()
    assert (turn.prompt_tokens, turn.completion_tokens, turn.reasoning_tokens) == (12, 9, 1)
    assert turn.stop_reason == "cancelled"
