"""A group of two processes and its models: a catalog switched on every rank; the ~50M model under tensor
parallel, equal to one process where its top two logits are apart; a follower whose copy of the model differs,
which the group detects and names."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from group_harness import MODEL, SCHEMA, Group, ask, body, permuted_copy, pipeline_model


# -- a catalog: rank 0 switches models, and every rank loads its part of the one it switched to ----------------
@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    import shutil

    from tinytitan.demo_model import ensure_demo_model

    root = tmp_path_factory.mktemp("catalog")
    shutil.copytree(ensure_demo_model(), root / "alpha")  # the demo model (qwen3)
    pipeline_model(root / "beta")  # another: its weights, as a qwen2
    unshardable_model(root / "gamma")  # one no group can split
    shutil.copytree(ensure_demo_model(), root / "delta")  # one whose weights are damaged
    weights = root / "delta" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:len(weights.read_bytes()) // 2])
    return root


def unshardable_model(out: Path) -> Path:
    """The demo model's weights as a 'gemma': a type mlx-lm gives neither tensor nor pipeline parallelism. One
    process serves it; a group refuses it by name."""
    import json
    import shutil

    import mlx.core as mx

    from tinytitan.demo_model import ensure_demo_model

    demo = Path(ensure_demo_model())
    out.mkdir(parents=True)
    for f in demo.iterdir():
        if f.suffix == ".json" and f.name != "config.json":
            shutil.copy(f, out / f.name)
    config = json.loads((demo / "config.json").read_text())
    config.pop("tinytitan_demo", None)
    config.update(model_type="gemma", architectures=["GemmaForCausalLM"], hidden_activation="gelu_pytorch_tanh")
    (out / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(out / "model.safetensors"), {
        k: v for k, v in mx.load(str(demo / "model.safetensors")).items() if not k.endswith(("q_norm.weight",
                                                                                          "k_norm.weight"))},
                        metadata={"format": "mlx"})
    return out


@pytest.fixture  # one test's: its ranks stop when it ends, not with the module (two cores)
def catalog_group(tmp_path_factory, catalog_dir):
    g = Group(tmp_path_factory.mktemp("catalog-group"), "--models-dir", str(catalog_dir))
    try:
        g.health = g.wait()
        yield g
    finally:
        g.stop()


async def test_a_catalog_switches_models_on_every_rank(catalog_group, catalog_dir, serve):
    from tinytitan.engine.backends.mlx import MLXBackend

    one = await serve(backend=[MLXBackend(catalog_dir / m, m, lazy=True) for m in ("alpha", "beta")])
    assert catalog_group.health["model"] is None and catalog_group.health["models"] == ["alpha", "beta", "delta",
                                                                                        "gamma"]
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
    # a model the group cannot split: that request is refused naming it, and the group serves on, whole
    async with httpx.AsyncClient(timeout=60) as c:
        path, payload = body("chat", "Hi.", False, model="gamma")
        r = await c.post(catalog_group.base + path, json=payload)
    assert r.status_code == 501, r.text
    assert "'gemma'" in r.json()["error"]["message"] and r.json()["error"]["code"] == "model_unshardable"
    # damaged weights: every rank fails to load them, and says so before any goes on
    async with httpx.AsyncClient(timeout=60) as c:
        path, payload = body("chat", "Hi.", False, model="delta")
        r = await c.post(catalog_group.base + path, json=payload)
    assert r.status_code >= 500 and r.json()["error"], r.text
    assert await ask(catalog_group.base, "chat", "Beta once more.", True, model="beta") == \
        await ask(one.base, "chat", "Beta once more.", True, model="beta")
    assert httpx.get(catalog_group.base + "/health").json()["group"]["status"] == "ok"
    # the unload route lets go of nothing: one rank alone cannot (a switch unloads on every rank)
    assert httpx.post(catalog_group.base + "/v1/models/unload", json={}).json()["unloaded"] == []
    assert httpx.get(catalog_group.base + "/health").json()["model"] == "beta"


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
# tokens compared (each of them, streamed and not, on the group and on one process): every decode step of the group
# runs the same sharded layers, so 12 find a wrong sum as 24 did; longer greedy answers are compared on the demo
# model's group (test_distributed.py)
ANSWER_50M = 12


@pytest.fixture(scope="module")
def dir_50m():
    from tinytitan.demo_model import ensure_demo_model

    return Path(ensure_demo_model("50m"))


@pytest.fixture  # one test's (see catalog_group); started, not yet waited for: its test does its own work meanwhile
def group_50m(tmp_path_factory, dir_50m):
    g = Group(tmp_path_factory.mktemp("group50m"), "--model", str(dir_50m), "--model-id", MODEL_50M)
    try:
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
    from tinytitan.engine.backends.mlx import MLXBackend

    # one process's answers first, while the group's ranks start (their start is most of this test's time)
    one = await serve(backend=MLXBackend(dir_50m, MODEL_50M))
    want, decided = decided_greedy(dir_50m, PROMPT_50M, ANSWER_50M)
    assert decided >= 8, decided  # a test of something
    kw = {"max_tokens": decided, "model": MODEL_50M}
    for stream in (False, True):
        assert await ask(one.base, "completions", PROMPT_50M, stream, **kw) == want
    health = await trio.to_thread.run_sync(group_50m.wait)
    assert health["group"]["sharding"] == "tensor"
    for stream in (False, True):
        assert await ask(group_50m.base, "completions", PROMPT_50M, stream, **kw) == want
