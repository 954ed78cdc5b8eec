"""A group of two processes, pipeline parallel (``--sharding pipeline``; the demo model's weights as a qwen2,
whose mlx-lm class offers it): each rank holds half the layers, and every protocol's answer, streamed and not,
alone and batched, is one process's, bit for bit. Idle, the ranks pause between heartbeats, and a rank killed
then breaks the group without a request (that comes last)."""

from __future__ import annotations

import signal

import httpx
import pytest
import trio

from group_harness import MODEL, Group, ask, ask_together, body, pipeline_model


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    return pipeline_model(tmp_path_factory.mktemp("qwen2") / "model")


@pytest.fixture(scope="module")
def pipeline_group(tmp_path_factory, pipeline_dir):
    """A group serving a model split by layers (``--sharding pipeline``; the model offers both)."""
    g = Group(tmp_path_factory.mktemp("pipeline"), "--model", str(pipeline_dir), "--model-id", MODEL,
              "--sharding", "pipeline")
    try:
        g.health = g.wait()
        yield g
    finally:
        g.stop()


@pytest.fixture(scope="module")
def pipeline_backend(pipeline_dir):
    from tinytitan.engine.backends.mlx import MLXBackend

    return MLXBackend(pipeline_dir, MODEL)


@pytest.fixture
async def one_pipeline(serve, pipeline_backend):
    """The pipelined model in one process (the reference)."""
    pipeline_backend.prompt_cache.clear()
    return await serve(backend=pipeline_backend)


# -- pipeline parallel: each rank holds some of the layers; every op runs as in one process, so bit for bit ------
def test_a_pipelined_group_names_the_layers_each_rank_holds(pipeline_group):
    g = pipeline_group.health["group"]
    assert (g["size"], g["sharding"], g["status"]) == (2, "pipeline", "ok")
    # mlx-lm gives the last layers to rank 0 (it samples) and the first to rank 1
    assert [r["holds"] for r in g["ranks"]] == ["layers 1-1 (pipeline parallel)", "layers 0-0 (pipeline parallel)"]


@pytest.mark.parametrize("protocol", ["chat", "completions", "messages", "responses", "ollama"])
@pytest.mark.parametrize("stream", [False, True])
async def test_pipelined_greedy_output_equals_one_process(pipeline_group, one_pipeline, protocol, stream):
    prompt = f"Pipelined: say something about {protocol} {'streamed' if stream else 'whole'}."
    want = await ask(one_pipeline.base, protocol, prompt, stream, max_tokens=32)
    got = await ask(pipeline_group.base, protocol, prompt, stream, max_tokens=32)
    assert got == want and want


async def test_pipelined_requests_sent_together_each_get_what_they_get_alone(pipeline_group, one_pipeline):
    prompts = ["Pipelined, first of two.", "Pipelined, second of the pair, a little longer than the first."]
    want = [await ask(one_pipeline.base, "chat", p, max_tokens=40) for p in prompts]
    batched = httpx.get(pipeline_group.base + "/health").json()["group"]["batch_steps"]
    got = await ask_together(pipeline_group.base, prompts, max_tokens=40)
    assert got == want
    assert httpx.get(pipeline_group.base + "/health").json()["group"]["batch_steps"] > batched



async def test_a_prompts_own_log_probabilities_on_a_pipelined_group_are_one_processs(pipeline_group, one_pipeline):
    """Echo with logprobs reads the prompt chunk by chunk with its logits, whose last collective (the layers'
    output gathered on every rank) only runs where they are read: every rank reads them, so the group stays in
    step — before, rank 0 alone did, and its gather waited for a rank that never came to it."""
    payload = {"model": MODEL, "prompt": "Pipelined: the sea is calm and the sky is grey", "echo": True,
               "logprobs": 1, "max_tokens": 3, "temperature": 0}
    got = []
    for base in (one_pipeline.base, pipeline_group.base):
        with trio.fail_after(60):
            async with httpx.AsyncClient(timeout=60) as c:
                r = await c.post(base + "/v1/completions", json=payload)
        assert r.status_code == 200, r.text
        got.append(r.json()["choices"][0])
    assert got[1]["text"] == got[0]["text"] and got[1]["logprobs"]["tokens"] == got[0]["logprobs"]["tokens"]
    assert got[1]["logprobs"]["token_logprobs"][1:] == pytest.approx(got[0]["logprobs"]["token_logprobs"][1:],
                                                                     abs=1e-3)
    assert await ask(pipeline_group.base, "chat", "Pipelined, still in step after it.", max_tokens=8) == \
        await ask(one_pipeline.base, "chat", "Pipelined, still in step after it.", max_tokens=8)

async def test_idle_the_ranks_pause_between_heartbeats_and_a_rank_lost_then_breaks_the_group(pipeline_group):
    """Idle, rank 0 broadcasts a heartbeat every ``idle_pause_s`` and the followers sleep between them (rather
    than spin in a collective): a rank killed while nothing is asked is seen by the next heartbeat."""
    first = httpx.get(pipeline_group.base + "/health").json()["group"]
    assert first["idle_pause_s"] > 0
    with trio.fail_after(20):
        while httpx.get(pipeline_group.base + "/health").json()["group"]["idle_heartbeats"] <= first["idle_heartbeats"]:
            await trio.sleep(0.05)
    pipeline_group.procs[1].send_signal(signal.SIGKILL)
    with trio.fail_after(30):  # no request: the heartbeat finds it (the ring's error, or the watchdog's)
        while (r := httpx.get(pipeline_group.base + "/health")).status_code != 503:
            await trio.sleep(0.1)
    assert r.json()["error"]["ranks"] == [1] and "rank 1" in r.json()["error"]["message"]
    path, payload = body("chat", "Anyone there?", False)
    assert httpx.post(pipeline_group.base + path, json=payload, timeout=10).status_code == 503
