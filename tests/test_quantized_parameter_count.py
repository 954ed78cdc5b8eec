"""A quantized MLX model is listed with the parameter count of the model it quantizes: each uint32 word of a
quantized layer holds 32/bits weights (10⅔ at 3 bits, 6.4 at 5, 5⅓ at 6: not a whole number), and the layer's
per-group scales and biases are the quantization's, not weights; a layer quantized to bits of its own (mlx-lm's
mixed recipes: ``mixed_3_6`` …) counts at its own (mlx-community publishes 3-, 4-, 5-, 6-, 8-bit and mixed
models; Ollama's clients show the count as ``details.parameter_size``)."""

from __future__ import annotations

import shutil

import httpx
import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from tinytitan.demo_model import ensure_demo_model
from tinytitan.engine.backends.mlx import MLXBackend

BITS = (3, 4, 5, 6, 8, "3_6")  # "3_6": 3 bits, the attention's values and the MLPs' down projections 6


def _mixed(path: str, module) -> dict | bool:
    return {"group_size": 64, "bits": 6} if path.endswith(("v_proj", "down_proj")) else True


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The demo model, and copies of it quantized to each of BITS (group size 64; the layers of "3_6" as
    ``_mixed`` says)."""
    from mlx_lm.utils import load_model, quantize_model, save_config

    demo = ensure_demo_model()
    dirs = {}
    for bits in BITS:
        d = tmp_path_factory.mktemp(f"demo-{bits}bit")
        for f in demo.iterdir():
            if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
                shutil.copy(f, d / f.name)
        model, config = load_model(demo)
        mixed = bits == "3_6"
        model, config = quantize_model(model, config, 64, 3 if mixed else bits,
                                       quant_predicate=_mixed if mixed else None)
        assert not mixed or config["quantization"]["model.layers.0.mlp.down_proj"]["bits"] == 6
        mx.save_safetensors(str(d / "model.safetensors"), dict(tree_flatten(model.parameters())))
        save_config(config, d / "config.json")
        dirs[bits] = d
    return demo, dirs


async def test_a_quantized_model_counts_the_weights_it_quantizes(serve, quantized):
    demo, dirs = quantized
    backends = [MLXBackend(demo, "float", lazy=True)] + [MLXBackend(d, f"q{bits}", lazy=True)
                                                         for bits, d in dirs.items()]
    s = await serve(backend=backends)
    async with httpx.AsyncClient(timeout=60) as h:
        tags = {m["name"]: m["details"] for m in (await h.get(s.url("/api/tags"))).json()["models"]}
        listed = {m["id"]: m for m in (await h.get(s.url("/v1/models"))).json()["data"]}
    count = listed["float"]["parameters"]
    assert count == sum(v.size for _, v in tree_flatten(mx.load(str(demo / "model.safetensors"))))
    # observed: 3, 5 and 6 bits 3% under the float model's count, 4 and 8 bits 3% over it, mixed 3/6 6% over
    for bits in BITS:
        assert listed[f"q{bits}"]["parameters"] == count, bits
        assert tags[f"q{bits}:latest"]["parameter_size"] == tags["float:latest"]["parameter_size"], bits
    assert tags["q4:latest"]["quantization_level"] == "4BIT"
