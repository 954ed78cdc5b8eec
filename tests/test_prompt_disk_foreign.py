"""The prompt cache on disk removes only its own files: a folder given to ``--prompt-cache-dir`` that also holds
other safetensors (a model's weights, a folder named by mistake) keeps them when the budget evicts, however old."""

from __future__ import annotations

import os

import numpy as np

from tinytitan.engine.cache.disk import PromptDisk
from tinytitan.engine.cache.disk_files import layout_of


def test_the_budget_evicts_only_the_caches_own_files(demo_backend, tmp_path):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    weights = tmp_path / "model.safetensors"  # someone's weights, older than any prefix
    mx.save_safetensors(str(weights), {"w": mx.ones((256, 256))}, {"format": "mlx"})
    os.utime(weights, (1, 1))
    kept = weights.read_bytes()

    def written(tokens, max_bytes):
        disk = PromptDisk(tmp_path, sorted(demo_backend.path.glob("*.safetensors")),
                          lambda: layout_of(demo_backend.ensure_loaded()), max_bytes)
        kv = make_prompt_cache(demo_backend.ensure_loaded())
        mx.eval(demo_backend.ensure_loaded()(mx.array(tokens)[None], cache=kv))
        disk.put(np.array(tokens), kv, ())
        assert disk.flush()
        return disk

    written(list(range(100, 200)), 1 << 30)
    [own] = [p for p in tmp_path.glob("*.safetensors") if p != weights]
    os.utime(own, (2, 2))
    second = written(list(range(300, 400)), int(own.stat().st_size * 1.5))  # over the budget: the older prefix goes
    assert not own.exists() and second.stats()["entries"] == 1
    assert weights.read_bytes() == kept
