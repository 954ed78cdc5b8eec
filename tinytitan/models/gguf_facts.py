"""What a model listing can say about a model's weights: parameter count, quantization, size and digest,
read from the files (a GGUF's header, an MLX directory's config and safetensors headers) without loading them.

Rules:
- the parameter count is the number of weights the file stores (every tensor, dequantized), as Ollama counts;
  ``human_number`` writes it the way Ollama does (``8.2B``, ``134.52M``). An MLX-quantized tensor's uint32
  words each hold 32/bits weights (3, 5 and 6 bits too: 10⅔, 6.4, 5⅓ a word), ``bits`` its layer's own where
  the config gives one (mlx-lm's mixed recipes), and its ``.scales`` and ``.biases`` (the quantization's, one
  pair a group) are no weights of the model;
- a GGUF's quantization is its ``general.file_type`` (llama.cpp's ``LLAMA_FTYPE``: ``Q4_K_M`` …), else the
  storage type holding the most weights; an MLX directory's is ``{bits}BIT`` per its config (``F32``/``F16``/
  ``BF16`` for floats);
- the digest of a GGUF is its file's SHA-256; of an MLX directory, its weights' digest (``weights_digest``:
  computed once, shared with the prompt cache on disk). It may read every weight byte the first time: the
  facts are read on a worker thread (``listing_off_loop``), never on the event loop.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path


def human_number(n: int) -> str:
    for unit, scale, places in (("T", 10**12, 1), ("B", 10**9, 1), ("M", 10**6, 2), ("K", 10**3, 0)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.{places}f}{unit}"
    return str(n)


def parameter_count(tensors) -> int:
    total = 0
    from .gguf_arch import AUXILIARY  # RoPE factors, read into the config: not weights

    for t in tensors:
        if t.name in AUXILIARY:
            continue
        n = 1
        for d in t.shape:
            n *= d
        total += n
    return total


def file_type_name(file_type, tensors) -> str:
    import gguf

    if file_type is not None:
        try:
            name = gguf.LlamaFileType(int(file_type)).name
        except ValueError:
            name = ""
        if name:
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    weights: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) >= 2:
            n = 1
            for d in t.shape:
                n *= d
            weights[t.type] = weights.get(t.type, 0) + n
    return max(weights, key=weights.get) if weights else ""


QUANTIZATION_TENSORS = (".scales", ".biases")  # an MLX-quantized layer's per-group scales and offsets


def _safetensors_params(path: Path) -> tuple[int, dict, dict]:
    """(stored elements, {dtype: elements}, {layer: uint32 elements}) from a safetensors header (the first 8
    bytes say its length); an MLX-quantized layer's scales and biases left out (not the model's weights)."""
    with open(path, "rb") as f:
        head = f.read(8)
        (n,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
        if not 2 <= n <= path.stat().st_size - 8:  # (a damaged file's first bytes are no length)
            raise ValueError(f"{path.name}: not a safetensors file (its header length is {n})")
        header = json.loads(f.read(n))
    total, by_type, packed = 0, {}, {}
    for name, t in header.items():
        if name == "__metadata__" or name.endswith(QUANTIZATION_TENSORS):
            continue
        count = 1
        for d in t["shape"]:
            count *= d
        total += count
        by_type[t["dtype"]] = by_type.get(t["dtype"], 0) + count
        if t["dtype"] == "U32":  # a quantized layer's packed weights (``<layer>.weight``)
            layer = name.removesuffix(".weight")
            packed[layer] = packed.get(layer, 0) + count
    return total, by_type, packed


def _readable_params(path: Path) -> tuple[int, dict, dict]:
    """``_safetensors_params``, or nothing (said once) for a damaged file: a listing names what it can."""
    try:
        return _safetensors_params(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        logging.getLogger("tinytitan.models").warning("%s: its safetensors header cannot be read (%s): the "
                                                      "model's parameter count is not listed", path, exc)
        return 0, {}, {}


def mlx_dir_facts(path: Path) -> dict:
    """Parameter count, quantization, bytes on disk and digest of an MLX model directory; what its conversion
    recorded where it came from a GGUF (``gguf_source.json``)."""
    from . import weights_digest

    source = path / "gguf_source.json"
    files = sorted(path.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files)  # (an Ollama model's directory links to them: followed)
    if source.is_file():
        facts = json.loads(source.read_text())
        if "digest" in facts:
            return {"parameters": facts.get("parameters"), "quantization": facts.get("quantization") or "",
                    "size": facts.get("size") or size, "digest": facts["digest"], "weights_bytes": size,
                    "format": "gguf"}
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    quant = config.get("quantization") or config.get("quantization_config") or {}
    total, by_type, packed = 0, {}, {}
    for f in files:
        n, types, words = _readable_params(f)
        total += n
        for k, v in types.items():
            by_type[k] = by_type.get(k, 0) + v
        packed.update(words)
    if isinstance(quant, dict) and quant.get("bits"):
        for layer, n in packed.items():  # each word holds 32 / bits weights (not always a whole number)
            own = quant.get(layer)
            bits = int(own["bits"]) if isinstance(own, dict) and own.get("bits") else int(quant["bits"])
            total += n * 32 // bits - n
        quantization = f"{int(quant['bits'])}BIT"
    else:
        quantization = max(by_type, key=by_type.get) if by_type else ""
    return {"parameters": total, "quantization": quantization, "size": size, "digest": weights_digest.digest(files),
            "weights_bytes": size, "format": "safetensors"}


_LISTING: dict[tuple, dict] = {}


def listing_facts(path: str | Path) -> dict:
    """What a model list shows about the model served from ``path``: ``name``-independent facts (parameters,
    quantization, size on disk, weight bytes, digest), plus an Ollama library entry's own (its manifest's
    digest, size and time, and its config's details). Remembered per directory and mtime."""
    path = Path(path)
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        return {}
    if key not in _LISTING:
        facts = mlx_dir_facts(path)
        ollama = path / "ollama.json"
        if ollama.is_file():
            facts.update(ollama=json.loads(ollama.read_text()))
        _LISTING[key] = facts
    return _LISTING[key]


def weights_on_gpu() -> bool:
    """Whether resident weights live in GPU memory (Metal); on a CPU, none of them do."""
    import mlx.core as mx

    return bool(getattr(mx, "metal", None) and mx.metal.is_available())


async def listing_off_loop(cards: list[dict]) -> dict[str, dict]:
    """``listing`` of each card by id, read on a worker thread: the first read of a model's facts may hash
    gigabytes of weights, and the event loop serves every stream meanwhile."""
    import trio

    return await trio.to_thread.run_sync(lambda: {c["id"]: listing(c) for c in cards})


def listing(card: dict) -> dict:
    """A model card's listing facts in one shape: ``parameters`` (int or None), ``parameter_size``
    (Ollama's spelling), ``quantization``, ``size`` (bytes on disk), ``resident`` (bytes of weights once
    loaded), ``digest`` (``sha256:…``), ``format``; an Ollama library entry's own under ``ollama``."""
    facts = listing_facts(card["path"]) if card.get("path") else {}
    params = facts.get("parameters")
    return {"parameters": params, "parameter_size": human_number(params) if params else "",
            "quantization": facts.get("quantization") or "", "size": int(facts.get("size") or 0),
            "resident": int(facts.get("weights_bytes") or 0), "digest": facts.get("digest") or "",
            "format": facts.get("format") or "", "ollama": facts.get("ollama")}
