"""--models-dir: every model directory listed, one resident at a time, switched on demand."""

from __future__ import annotations

import httpx
import pytest

from tinytitan.model_setup import find_model_dirs
from tinytitan.engine.backends.mlx import MLXBackend
from tinytitan.engine.backends.scripted import ScriptEntry
from catalog_helpers import GroupDiesOnLoad
from catalog_helpers import models_dir  # noqa: F401  (the fixture)


def catalog(root):
    return [MLXBackend(d, d.relative_to(root).as_posix(), lazy=True) for d in find_model_dirs(root)]


async def test_catalog_lists_switches_and_unloads(serve, models_dir):
    s = await serve(backend=catalog(models_dir))
    chat = {"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=60) as c:
        models = (await c.get(s.url("/v1/models"))).json()["data"]
        assert [m["id"] for m in models] == ["alpha", "org/beta"]
        assert not any(m["loaded"] for m in models)
        # one model answers without loading anything
        info = (await c.get(s.url("/v1/models/org/beta"))).json()
        assert info["id"] == "org/beta" and info["loaded"] is False and info["context_window"] > 0
        assert s.engine.resident is None
        r = await c.post(s.url("/v1/chat/completions"), json={"model": "alpha", **chat})
        assert r.status_code == 200 and r.json()["model"] == "alpha"
        assert s.engine.resident == "alpha"
        r = await c.post(s.url("/v1/chat/completions"), json={"model": "org/beta-fast", **chat})
        assert r.status_code == 200 and r.json()["model"] == "org/beta"
        assert s.engine.resident == "org/beta"
        assert s.engine.backends["alpha"].model is None  # the other one was unloaded
        assert [m["id"] for m in (await c.get(s.url("/v1/models"))).json()["data"] if m["loaded"]] == ["org/beta"]
        r = await c.post(s.url("/v1/chat/completions"), json={"model": "gamma", **chat})
        assert r.status_code == 404 and "gamma" in r.json()["error"]["message"]
        r = await c.post(s.url("/v1/models/unload"), json={})
        assert r.json() == {"unloaded": ["org/beta"], "model": "org/beta"}  # what was freed, not the first listed
        assert s.engine.resident is None and s.engine.backends["org/beta"].model is None
        r = await c.post(s.url("/v1/models/unload"), json={"model": "alpha:latest"})
        assert r.json() == {"unloaded": [], "model": "alpha"}  # named as served; nothing resident to free
        health = (await c.get(s.url("/health"))).json()
        assert health["model"] is None and health["models"] == ["alpha", "org/beta"]


def test_find_model_dirs(models_dir):
    assert [p.relative_to(models_dir).as_posix() for p in find_model_dirs(models_dir)] == ["alpha", "org/beta"]


async def test_cpu_twin_only_where_a_second_engine_exists(serve, models_dir, monkeypatch):
    import argparse

    from tinytitan import model_setup

    args = argparse.Namespace(script=None, models_dir=str(models_dir), model=None, model_id=None,
                              prompt_cache_mib=64, reasoning_effort=None, thinking=None)
    monkeypatch.setattr(model_setup, "second_engine_available", lambda: False)
    assert [b.model_id for b in model_setup.make_backends(args)] == ["alpha", "org/beta"]  # Linux: CPU is the only engine
    monkeypatch.setattr(model_setup, "second_engine_available", lambda: True)
    backends = model_setup.make_backends(args)
    assert [b.model_id for b in backends] == ["alpha", "org/beta", "alpha@cpu", "org/beta@cpu"]
    # the twin decodes on mlx's CPU stream, through the same server path
    s = await serve(backend=backends)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={"model": "alpha@cpu", "max_tokens": 2,
                                                               "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["model"] == "alpha@cpu"
        info = (await c.get(s.url("/v1/models/alpha@cpu"))).json()
        assert info["device"] == "cpu"


def test_linux_has_no_second_engine():
    import sys

    from tinytitan.model_setup import second_engine_available

    if sys.platform.startswith("linux"):
        assert second_engine_available() is False


async def test_a_model_whose_weights_fail_to_load_says_so_in_each_protocols_envelope(serve, tmp_path):
    """A catalog model's weights are read on its first request: weights found damaged then (an incomplete
    download) are a 500 naming the model and why, with code model_load_failed, not 'internal error'."""
    import shutil

    from tinytitan.demo_model import ensure_demo_model

    broken = tmp_path / "broken"
    shutil.copytree(ensure_demo_model(), broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    s = await serve(backend=MLXBackend(broken, "broken", lazy=True))
    ask = [{"role": "user", "content": "hi"}]
    async with httpx.AsyncClient(timeout=60) as c:
        for path, body in (("/v1/chat/completions", {"model": "broken", "messages": ask}),
                           ("/v1/messages", {"model": "broken", "max_tokens": 5, "messages": ask}),
                           ("/api/chat", {"model": "broken", "stream": False, "messages": ask})):
            r = await c.post(s.url(path), json=body, headers={"anthropic-version": "2023-06-01"})
            assert r.status_code == 500, r.text
            assert "The model broken cannot be loaded (RuntimeError: " in r.text, r.text
    assert r.json()["error"].startswith("The model broken cannot be loaded")


async def test_a_group_broken_during_a_load_stays_503_group_broken(serve, demo_tok):
    s = await serve(backend=GroupDiesOnLoad([ScriptEntry("never")], demo_tok))
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"),
                         json={"model": s.engine.model_id, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.json()["error"]["code"] == "group_broken", r.text


def test_model_id_picks_one_of_the_catalogs_models(models_dir, monkeypatch):
    """``serve --models-dir DIR --model-id NAME`` (as ``launch`` passes them on): every model keeps its own id, the
    one named first (the banner's, the default); a name the catalog does not hold is refused at start, not ignored."""
    import argparse

    from tinytitan import model_setup

    monkeypatch.setattr(model_setup, "second_engine_available", lambda: False)
    args = argparse.Namespace(script=None, models_dir=str(models_dir), model=None, model_id="org/beta",
                              prompt_cache_mib=64, reasoning_effort=None, thinking=None)
    assert [b.model_id for b in model_setup.make_backends(args)] == ["org/beta", "alpha"]
    args.model_id = "gamma"
    with pytest.raises(SystemExit, match="--model-id gamma: no such model"):
        model_setup.make_backends(args)
