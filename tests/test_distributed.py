"""One model served by a group of two processes (MLX's ring backend on loopback). Tensor parallel (the demo
model): every protocol answers, streamed and not, exactly what one process answers (greedy); requests batch,
hang up, follow a JSON schema and force a tool call as on one machine; a rank killed mid-answer fails that
answer in its protocol's envelope (no hang), and the group reports itself broken (``/health`` 503). Pipeline
parallel (``--sharding pipeline``, the demo model as a qwen2, whose mlx-lm class offers it): each rank holds
half the layers, and every protocol's answer, streamed and not, alone and batched, is one process's.

The two ranks are started as ``mlx.launch -n 2 --backend ring`` starts them (``MLX_RANK``, and an
``MLX_HOSTFILE`` listing one loopback address per rank), but by the test itself: mlx.launch ends every rank
when one exits, and the test must see rank 0 outlive rank 1. One group serves the whole module; the kill
comes last."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trio

import strict
from sse import parse_sse

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tinytitan-demo"
START_S = 120  # loading on two shared cores, with others busy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pipeline_model(out: Path) -> Path:
    """A model whose mlx-lm class offers pipeline parallelism (qwen2's ``model.model.pipeline``): the demo
    model's tokenizer, template and weights, as a qwen2 (the demo's qwen3 lacks ``pipeline``): its attention's
    q/k norms dropped, seeded q/k/v biases added, and the weight index ``sharded_load`` splits layers by."""
    import shutil

    import mlx.core as mx

    from tinytitan.demo_model import ensure_demo_model

    demo = Path(ensure_demo_model())
    out.mkdir(parents=True, exist_ok=True)
    for f in demo.iterdir():
        if f.suffix == ".json" and f.name != "config.json":
            shutil.copy(f, out / f.name)
    config = json.loads((demo / "config.json").read_text())
    config.pop("tinytitan_demo", None)
    config.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    (out / "config.json").write_text(json.dumps(config, indent=1))
    weights = {k: v for k, v in mx.load(str(demo / "model.safetensors")).items()
               if not k.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight"))}
    key = mx.random.key(21)
    for k in sorted(weights):
        if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            key, sub = mx.random.split(key)
            weights[k.replace(".weight", ".bias")] = 0.02 * mx.random.normal((weights[k].shape[0],), key=sub)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model.safetensors" for k in sorted(weights)}}))
    return out


class Group:
    def __init__(self, tmp: Path, *serve: str, rank_args: dict[int, list[str]] | None = None):
        ring = [[f"127.0.0.1:{free_port()}"], [f"127.0.0.1:{free_port()}"]]
        hostfile = tmp / "hosts.json"
        hostfile.write_text(json.dumps(ring))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.logs = [tmp / f"rank{r}.log" for r in range(2)]
        env = dict(os.environ, MLX_HOSTFILE=str(hostfile), PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "tinytitan", "serve", "--port", str(self.port), "--max-batch", "4",
             "--group-timeout", "4",
             "--responses-store", "memory", *serve, *(rank_args or {}).get(r, [])],
            env=dict(env, MLX_RANK=str(r)), stdout=self.logs[r].open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
            for r in range(2)]

    def wait(self) -> dict:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            for r, p in enumerate(self.procs):
                if p.poll() is not None:
                    raise AssertionError(f"rank {r} exited: {self.logs[r].read_text()[-3000:]}")
            try:
                return httpx.get(self.base + "/health", timeout=2).json()
            except httpx.HTTPError:
                time.sleep(0.5)
        raise AssertionError("the group did not come up: " + self.logs[0].read_text()[-3000:])

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    g = Group(tmp_path_factory.mktemp("group"))
    try:
        g.health = g.wait()
        yield g
    finally:
        g.stop()


@pytest.fixture
async def one(serve, demo_backend):
    """The same model in one process (the reference)."""
    demo_backend.prompt_cache.clear()
    return await serve(backend=demo_backend)


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
    from tinytitan.engine.mlx_backend import MLXBackend

    return MLXBackend(pipeline_dir, MODEL)


@pytest.fixture
async def one_pipeline(serve, pipeline_backend):
    """The pipelined model in one process (the reference)."""
    pipeline_backend.prompt_cache.clear()
    return await serve(backend=pipeline_backend)


# -- each protocol's request, and the text its answer carries ----------------------------------------------------
def body(protocol: str, text: str, stream: bool, max_tokens: int = 24, model: str = MODEL,
         **extra) -> tuple[str, dict]:
    chat = {"model": model, "messages": [{"role": "user", "content": text}], "temperature": 0, "stream": stream}
    if protocol == "chat":
        return "/v1/chat/completions", dict(chat, max_tokens=max_tokens, **extra)
    if protocol == "completions":
        return "/v1/completions", {"model": model, "prompt": text, "temperature": 0, "max_tokens": max_tokens,
                                   "stream": stream}
    if protocol == "messages":
        return "/v1/messages", dict(chat, max_tokens=max_tokens)
    if protocol == "responses":
        return "/v1/responses", {"model": model, "input": text, "temperature": 0, "max_output_tokens": max_tokens,
                                 "stream": stream}
    if protocol == "ollama":
        return "/api/chat", {"model": model, "messages": chat["messages"], "stream": stream,
                             "options": {"temperature": 0, "num_predict": max_tokens}}
    raise KeyError(protocol)


def text_of(protocol: str, stream: bool, raw: bytes) -> str:
    """The answer's text, each body and event checked strictly against the official SDK models (Ollama's by
    shape: its replies are NDJSON)."""
    if protocol == "ollama":
        lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
        assert lines[-1]["done"] is True
        return "".join(line["message"]["content"] for line in lines)
    if not stream:
        data = json.loads(raw)
        strict.body(data)
        if protocol == "chat":
            return data["choices"][0]["message"]["content"]
        if protocol == "completions":
            return data["choices"][0]["text"]
        if protocol == "messages":
            return "".join(b.get("text", "") for b in data["content"])
        return "".join(c["text"] for item in data["output"] if item["type"] == "message" for c in item["content"])
    events = strict.sse_events(protocol, parse_sse(raw.decode()))
    out = []
    for _, data in events:
        if not isinstance(data, dict):
            continue
        if protocol == "chat" and data.get("choices"):
            out.append(data["choices"][0]["delta"].get("content") or "")
        elif protocol == "completions" and data.get("choices"):
            out.append(data["choices"][0]["text"])
        elif protocol == "messages" and data.get("type") == "content_block_delta":
            out.append(data["delta"].get("text", ""))
        elif protocol == "responses" and data.get("type") == "response.output_text.delta":
            out.append(data["delta"])
    return "".join(out)


async def ask(base: str, protocol: str, text: str, stream: bool = False, **kw) -> str:
    path, payload = body(protocol, text, stream, **kw)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(base + path, json=payload)
    assert r.status_code == 200, r.text
    return text_of(protocol, stream, r.content)


# -- the tests ---------------------------------------------------------------------------------------------------
def test_the_group_names_its_ranks_and_what_each_holds(group):
    g = group.health["group"]
    assert (g["size"], g["backend"], g["sharding"], g["status"]) == (2, "ring", "tensor", "ok")
    assert httpx.get(group.base + "/health").status_code == 200 and g["broken_ranks"] == []
    host = socket.gethostname()[:64]
    assert g["ranks"] == [{"rank": r, "host": host, "holds": "1/2 of every layer (tensor parallel)"}
                          for r in range(2)]
    log = group.logs[0].read_text()
    assert "group of 2 (ring backend): rank 1 on" in log


@pytest.mark.parametrize("protocol", ["chat", "completions", "messages", "responses", "ollama"])
@pytest.mark.parametrize("stream", [False, True])
async def test_greedy_output_equals_one_process(group, one, protocol, stream):
    prompt = f"Say something about {protocol} {'streamed' if stream else 'whole'}."
    want = await ask(one.base, protocol, prompt, stream)
    got = await ask(group.base, protocol, prompt, stream)
    assert got == want and want


async def test_two_requests_sent_together_each_get_what_they_get_alone(group, one):
    prompts = ["First of two sent together.", "Second of the pair, a little longer than the first one."]
    want = [await ask(one.base, "chat", p, max_tokens=40) for p in prompts]
    batched = httpx.get(group.base + "/health").json()["group"]["batch_steps"]
    got = [None, None]
    async with trio.open_nursery() as n:
        for i, p in enumerate(prompts):
            async def go(i=i, p=p):
                got[i] = await ask(group.base, "chat", p, max_tokens=40)
            n.start_soon(go)
    assert got == want
    g = httpx.get(group.base + "/health").json()["group"]
    assert g["batch_steps"] > batched  # they decoded together
    assert g["plan_broadcasts"] > 0 and 0 < g["plan_broadcast_share"] < 1 and g["steps"] > 0


async def test_a_conversation_goes_on_from_the_prompt_cache_on_every_rank(group, one):
    """Rank 0 takes a prefix from its prompt cache; each follower must take the same one from its own (or it
    stops, diverged: see lockstep.py), and the answer is still one process's. Both decode without drafts (a
    group does; a drafting row keeps one token less of its answer in the cache), so their cached counts agree."""
    first = [{"role": "user", "content": "Start of a conversation that goes on."}]
    answers = []
    for base in (group.base, one.base):
        async with httpx.AsyncClient(timeout=60) as c:
            r1 = (await c.post(base + "/v1/chat/completions", json={
                "model": MODEL, "messages": first, "temperature": 0, "max_tokens": 16, "speculative": False})).json()
            turn = first + [r1["choices"][0]["message"], {"role": "user", "content": "And then?"}]
            r2 = (await c.post(base + "/v1/chat/completions", json={
                "model": MODEL, "messages": turn, "temperature": 0, "max_tokens": 16, "speculative": False})).json()
        answers.append((r1["choices"][0]["message"]["content"], r2["choices"][0]["message"]["content"],
                        r2["usage"]["prompt_tokens_details"]["cached_tokens"]))
    assert answers[0] == answers[1] and answers[0][2] > 0


async def test_a_hang_up_mid_answer_leaves_the_group_in_step(group, one):
    path, payload = body("chat", "A long answer the client will not wait for.", True, max_tokens=400)
    async with httpx.AsyncClient(timeout=60) as c:
        async with c.stream("POST", group.base + path, json=payload) as r:
            seen = 0
            async for _line in r.aiter_lines():
                seen += 1
                if seen > 6:
                    break  # the client hangs up
    prompt = "After the hang-up."
    assert await ask(group.base, "chat", prompt, max_tokens=30) == await ask(one.base, "chat", prompt, max_tokens=30)
    with trio.fail_after(20):
        while httpx.get(group.base + "/health").json()["running"]:
            await trio.sleep(0.05)


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "count"],
          "properties": {"name": {"type": "string", "maxLength": 10}, "count": {"type": "integer"}}}


async def test_a_json_schema_and_a_forced_tool_call_as_on_one_process(group, one):
    fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "rec", "schema": SCHEMA}}}
    got = await ask(group.base, "chat", "A record, please.", max_tokens=60, **fmt)
    assert got == await ask(one.base, "chat", "A record, please.", max_tokens=60, **fmt)
    assert set(json.loads(got)) == {"name", "count"}
    tools = {"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}],
             "tool_choice": "required"}
    path, payload = body("chat", "Weather in Paris?", False, max_tokens=80, **tools)
    answers = []
    for base in (group.base, one.base):
        async with httpx.AsyncClient(timeout=60) as c:
            r = await c.post(base + path, json=payload)
        assert r.status_code == 200, r.text
        calls = strict.chat_completion(r.json()).choices[0].message.tool_calls
        answers.append([(c.function.name, c.function.arguments) for c in calls])
    assert answers[0] == answers[1] and answers[0][0][0] == "get_weather"


def test_the_sharding_is_what_the_model_offers_or_refused_by_its_type(pipeline_dir):
    from mlx_lm.utils import load_model

    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.group import sharding

    qwen3, _ = load_model(Path(ensure_demo_model()), lazy=True, strict=False)  # shard only
    qwen2, _ = load_model(pipeline_dir, lazy=True, strict=False)  # shard and pipeline
    assert [sharding(qwen3, "auto"), sharding(qwen3, "tensor")] == ["tensor", "tensor"]
    assert [sharding(qwen2, w) for w in ("auto", "tensor", "pipeline")] == ["tensor", "tensor", "pipeline"]
    with pytest.raises(SystemExit, match="the model type 'qwen3' offers no pipeline parallelism in mlx-lm"):
        sharding(qwen3, "pipeline")


# -- a catalog: rank 0 switches models, and every rank loads its part of the one it switched to ----------------
@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    import shutil

    from tinytitan.demo_model import ensure_demo_model

    root = tmp_path_factory.mktemp("catalog")
    shutil.copytree(ensure_demo_model(), root / "alpha")  # the demo model (qwen3)
    pipeline_model(root / "beta")  # another: its weights, as a qwen2
    return root


@pytest.fixture(scope="module")
def catalog_group(tmp_path_factory, catalog_dir):
    g = Group(tmp_path_factory.mktemp("catalog-group"), "--models-dir", str(catalog_dir))
    try:
        g.health = g.wait()
        yield g
    finally:
        g.stop()


async def test_a_catalog_switches_models_on_every_rank(catalog_group, catalog_dir, serve):
    from tinytitan.engine.mlx_backend import MLXBackend

    one = await serve(backend=[MLXBackend(catalog_dir / m, m, lazy=True) for m in ("alpha", "beta")])
    assert catalog_group.health["model"] is None and catalog_group.health["models"] == ["alpha", "beta"]
    for model in ("alpha", "beta", "alpha"):
        prompt = f"A question for {model}."
        want = await ask(one.base, "chat", prompt, max_tokens=20, model=model)
        assert await ask(catalog_group.base, "chat", prompt, max_tokens=20, model=model) == want and want
        health = httpx.get(catalog_group.base + "/health").json()
        assert health["model"] == model and health["group"]["status"] == "ok"
    assert await ask(one.base, "chat", "Beta once more.", True, model="beta") == \
        await ask(catalog_group.base, "chat", "Beta once more.", True, model="beta")
    log = catalog_group.logs[1].read_text()  # the follower loaded each part as rank 0 switched
    assert log.count("loaded rank 1's part of alpha") == 2 and log.count("loaded rank 1's part of beta") == 2
    # the unload route lets go of nothing: one rank alone cannot (a switch unloads on every rank)
    assert httpx.post(catalog_group.base + "/v1/models/unload", json={}).json()["unloaded"] == []
    assert httpx.get(catalog_group.base + "/health").json()["model"] == "beta"


# -- a follower that samples otherwise than rank 0 (its copy of the model differs) ---------------------------
def permuted_copy(out: Path) -> Path:
    """The demo model with its tokenizer's ordinary token ids swapped in pairs (the special tokens kept): the
    same weights and text, but a grammar compiled on it allows other ids."""
    import shutil

    from tinytitan.demo_model import ensure_demo_model

    shutil.copytree(ensure_demo_model(), out)
    spec = json.loads((out / "tokenizer.json").read_text())
    special = {t["id"] for t in spec["added_tokens"]}
    vocab = spec["model"]["vocab"]
    ids = sorted(i for i in vocab.values() if i not in special)
    swap = {a: b for x, y in zip(ids[::2], ids[1::2]) for a, b in ((x, y), (y, x))}
    spec["model"]["vocab"] = {t: swap.get(i, i) for t, i in vocab.items()}
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out


async def test_a_follower_that_samples_otherwise_breaks_the_group_naming_it(tmp_path):
    """Rank 1's copy of the model has another tokenizer: a JSON schema's grammar allows it other ids, so it
    samples another first token than rank 0 accepts. It reports that in its next broadcast and stops; rank 0
    fails the answer and breaks the group, naming rank 1."""
    from tinytitan.demo_model import ensure_demo_model

    other = permuted_copy(tmp_path / "other")
    g = Group(tmp_path, "--model-id", MODEL, "--model", str(ensure_demo_model()),
              rank_args={1: ["--model", str(other)]})  # the last --model wins
    try:
        g.wait()
        fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "rec", "schema": SCHEMA}}}
        path, payload = body("chat", "A record, please.", True, max_tokens=40, **fmt)
        with trio.fail_after(30):
            async with httpx.AsyncClient(timeout=30) as c:
                r = await c.post(g.base + path, json=payload)
        assert "rank 1 diverged from rank 0" in r.text, r.text
        health = httpx.get(g.base + "/health")
        assert health.status_code == 503 and health.json()["error"]["ranks"] == [1]
        assert "rank 1 diverged: it sampled" in g.logs[1].read_text()
        with trio.fail_after(10):
            while g.procs[1].poll() is None:
                await trio.sleep(0.1)
    finally:
        g.stop()


# -- the ~50M model, tensor parallel: where its top two logits are further apart than the reordered partial sums
# can move them, the group's greedy token is one process's ---------------------------------------------------
MODEL_50M = "tinytitan-demo-50m"
MARGIN = 1e-3  # top-two logit gap taken as decided: float32 sums reordered across 2 ranks move a logit ~1e-5
PROMPT_50M = "The quick brown fox"


@pytest.fixture(scope="module")
def dir_50m():
    from tinytitan.demo_model import ensure_demo_model

    return Path(ensure_demo_model("50m"))


@pytest.fixture(scope="module")
def group_50m(tmp_path_factory, dir_50m):
    g = Group(tmp_path_factory.mktemp("group50m"), "--model", str(dir_50m), "--model-id", MODEL_50M)
    try:
        g.health = g.wait()
        yield g
    finally:
        g.stop()


def decided_greedy(path: Path, prompt: str, n: int) -> list[int]:
    """The prompt's greedy continuation in this process (mlx-lm alone), up to the first token whose top-two
    logits are closer than MARGIN (past it, another order of the same sums may pick the other) or the end."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load

    model, tok = load(str(path))
    cache, x, out = make_prompt_cache(model), mx.array([tok.encode(prompt)]), []
    while len(out) < n:
        logits = model(x, cache=cache)[0, -1].astype(mx.float32)
        second, first = sorted(mx.topk(logits, 2).tolist())
        token = int(mx.argmax(logits))
        if first - second < MARGIN or token in tok.eos_token_ids:
            break
        out.append(token)
        x = mx.array([[token]])
    return tok.decode(out), len(out)


@pytest.mark.model50m
async def test_50m_greedy_output_equals_one_process_where_the_top_two_are_apart(group_50m, serve, dir_50m):
    from tinytitan.engine.mlx_backend import MLXBackend

    assert group_50m.health["group"]["sharding"] == "tensor"
    one = await serve(backend=MLXBackend(dir_50m, MODEL_50M))
    want, decided = decided_greedy(dir_50m, PROMPT_50M, 24)
    assert decided >= 8, decided  # a test of something
    for stream in (False, True):
        kw = {"max_tokens": decided, "model": MODEL_50M}
        assert await ask(one.base, "completions", PROMPT_50M, stream, **kw) == want
        assert await ask(group_50m.base, "completions", PROMPT_50M, stream, **kw) == want


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
    got = [None, None]
    async with trio.open_nursery() as n:
        for i, p in enumerate(prompts):
            async def go(i=i, p=p):
                got[i] = await ask(pipeline_group.base, "chat", p, max_tokens=40)
            n.start_soon(go)
    assert got == want
    assert httpx.get(pipeline_group.base + "/health").json()["group"]["batch_steps"] > batched


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


async def test_a_killed_rank_fails_the_answer_in_flight_and_breaks_the_group(group):
    path, payload = body("messages", "A long answer that rank 1 will not see the end of.", True, max_tokens=2000)
    events = []
    with trio.fail_after(30):  # no hang
        async with httpx.AsyncClient(timeout=30) as c:
            async with c.stream("POST", group.base + path, json=payload) as r:
                assert r.status_code == 200
                raw = ""
                async for chunk in r.aiter_text():
                    raw += chunk
                    if group.procs[1].poll() is None and raw.count("content_block_delta") > 3:
                        group.procs[1].send_signal(signal.SIGKILL)
        events = strict.sse_events("messages", parse_sse(raw))
    error = events[-1][1]
    # the ring notices the lost peer, or the watchdog the step that never ends: either names rank 1
    message = error["error"]["message"]
    assert error["type"] == "error" and ("rank 0 lost rank 1" in message or "rank 1 died" in message), message
    r = httpx.get(group.base + "/health")
    health = r.json()
    assert r.status_code == 503  # what a load balancer or a script checks
    assert health["status"] == "broken" and health["group"]["status"] == "broken"
    assert health["error"]["ranks"] == [1] == health["group"]["broken_ranks"]
    assert health["error"]["message"] == health["group"]["error"] and "rank 1" in health["error"]["message"]
    assert health["running"] == 0
    for protocol, status in [("chat", 503), ("messages", 503), ("ollama", 503)]:
        path, payload = body(protocol, "Anyone there?", False)
        r = httpx.post(group.base + path, json=payload, timeout=10)
        assert r.status_code == status and "group of processes serving it is broken" in r.text, r.text
    strict.anthropic_error(httpx.post(group.base + "/v1/messages", json=body("messages", "x", False)[1]).json())
    assert group.procs[0].poll() is None  # rank 0 serves on (health, stored responses), refusing generation
