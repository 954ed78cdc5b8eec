"""What a model listing can say about a model's weights: parameter count, quantization, size and digest,
read from the files (a GGUF's header, an MLX directory's config and safetensors headers) without loading them.

Rules:
- the parameter count is the number of weights the file stores (every tensor, dequantized), as Ollama counts;
  ``human_number`` writes it the way Ollama does (``8.2B``, ``134.52M``);
- a GGUF's quantization is its ``general.file_type`` (llama.cpp's ``LLAMA_FTYPE``: ``Q4_K_M`` …), else the
  storage type holding the most weights; an MLX directory's is ``{bits}BIT`` per its config (``F32``/``F16``/
  ``BF16`` for floats);
- the digest of a GGUF is its file's SHA-256; of an MLX directory, the SHA-256 of its weight files' own
  digests in name order (a file is hashed once per size and mtime: ``gguf.file_digest`` remembers).
"""

from __future__ import annotations

import hashlib
import json
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
    for t in tensors:
        if t.name == "rope_freqs.weight":
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


def _safetensors_params(path: Path) -> tuple[int, dict]:
    """(stored elements, {dtype: elements}) from a safetensors header (the first 8 bytes say its length)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    total, by_type = 0, {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for d in t["shape"]:
            count *= d
        total += count
        by_type[t["dtype"]] = by_type.get(t["dtype"], 0) + count
    return total, by_type


def mlx_dir_facts(path: Path) -> dict:
    """Parameter count, quantization, bytes on disk and digest of an MLX model directory; what its conversion
    recorded where it came from a GGUF (``gguf_source.json``)."""
    from .gguf import file_digest

    source = path / "gguf_source.json"
    files = sorted(path.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files)
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
    total, by_type = 0, {}
    for f in files:
        n, types = _safetensors_params(f)
        total += n
        for k, v in types.items():
            by_type[k] = by_type.get(k, 0) + v
    if isinstance(quant, dict) and quant.get("bits"):
        packed = by_type.get("U32", 0)  # each packed word holds 32 / bits weights
        total += packed * (32 // int(quant["bits"]) - 1)
        quantization = f"{int(quant['bits'])}BIT"
    else:
        quantization = max(by_type, key=by_type.get) if by_type else ""
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{file_digest(f)}\n".encode())
    return {"parameters": total, "quantization": quantization, "size": size, "digest": "sha256:" + h.hexdigest(),
            "weights_bytes": size, "format": "safetensors"}
