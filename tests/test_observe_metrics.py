"""/metrics, parsed by prometheus_client's own parser: the request and token counters, the prompt cache, the
resident model, the batch, and the route each request is counted under."""

from __future__ import annotations

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from observe_helpers import ANSWER, MODEL, client, eventually, has, scrape, tokens

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
    assert await eventually(lambda: has(s, ("tinytitan_requests_total", route_400)))


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
    assert await eventually(lambda: has(s, ("tinytitan_requests_total", left)))
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
