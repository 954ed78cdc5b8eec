"""A draft model that cannot be loaded is named as the draft model (--draft-model), at start and at a later
load, and a failed load leaves nothing resident: the next request fails alike, never serves without it."""

from __future__ import annotations

import shutil

import pytest

from batching_helpers import req, run


def _damaged_copy(source, target):
    shutil.copytree(source, target)
    for f in target.glob("*.safetensors"):
        f.write_bytes(b"\x00" * 64)  # damaged weights, the tokenizer intact
    return target


def test_a_draft_model_with_damaged_weights_is_refused_naming_draft_model(demo_backend, tmp_path):
    from tinytitan.flags import build_parser
    from tinytitan.model_setup import make_backends

    bad = _damaged_copy(demo_backend.path, tmp_path / "bad-draft")
    with pytest.raises(SystemExit) as got:
        make_backends(build_parser().parse_args(["serve", "--model", str(demo_backend.path),
                                                 "--draft-model", str(bad)]))
    assert "--draft-model" in str(got.value), str(got.value)


async def test_a_draft_model_that_fails_to_load_leaves_the_backend_unloaded(demo_backend, tmp_path):
    """A lazy load (after an unload) whose draft model fails: the engine reports the failure; the backend
    must not keep its main weights resident while the engine thinks nothing is."""
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.speculative.speculator import SpeculativeConfig
    from tinytitan.events import Failed, Finished

    bad = _damaged_copy(demo_backend.path, tmp_path / "bad-draft")
    b = MLXBackend(demo_backend.path, demo_backend.model_id, lazy=True,
                   speculative=SpeculativeConfig(lookup=False, draft_model=bad, draft_model_name="bad-draft"))
    engine = Engine(b, max_batch=1)
    with pytest.raises(Exception) as got:
        await run(engine, req("hi", max_tokens=3))
    assert "--draft-model bad-draft" in str(got.value)
    assert not (b.loaded and engine.resident is None)
    # the next request does not find the model "loaded" and serve it without its draft model: it fails alike
    with pytest.raises(Exception, match="--draft-model bad-draft"):
        await run(engine, req("hi", max_tokens=3))
    assert not b.loaded and b._draft is None
