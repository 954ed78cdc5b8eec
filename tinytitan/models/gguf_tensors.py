"""A GGUF's tensors turned into MLX arrays one at a time, and written out in bounded shards.

Rules, per tensor, by its storage type and the form asked for:

- Q4_0, Q4_1, Q8_0 kept quantized: ``mlx.core.load`` reads them into MLX's own affine layout exactly (group
  size 32, 4 or 8 bits);
- every other quantized type the ``gguf`` package dequantizes (the K-quants Q2_K … Q6_K, Q5_0/Q5_1, the IQ
  types, TQ1_0/TQ2_0, MXFP4 …): dequantized by that package (llama.cpp's own reference code), then
  ``quantized``: requantized with ``mx.quantize`` (group size 32; 4 bits for a type of at most 5 bits per
  weight, else 8, so a Q6_K never drops to 4 bits), or ``float16`` / ``float32``: kept as floats;
- F32, F16, BF16: as they are (cast to the form's float type when one is asked for).

Only one tensor is widened at a time; converted arrays go to a shard file once ``SHARD_BYTES`` have gathered,
so a conversion holds at most a shard plus one tensor.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger("tinytitan.gguf")

MLX_NATIVE = frozenset({"Q4_0", "Q4_1", "Q8_0"})  # mlx.core.load keeps these in its affine layout
FLOATS = frozenset({"F32", "F16", "BF16"})
GROUP_SIZE = 32
SHARD_BYTES = 1 << 30
PROGRESS_EVERY_S = 2.0


@functools.cache
def dequantizable() -> frozenset[str]:
    """The quantized storage types the installed ``gguf`` package dequantizes (asked of it, one empty block
    each: a newer package that learns a type extends this by itself)."""
    import gguf
    import numpy as np

    found = set()
    for kind, (_, type_size) in gguf.GGML_QUANT_SIZES.items():
        if kind.name in FLOATS or kind.name in ("I8", "I16", "I32", "I64", "F64"):
            continue  # floats and plain integers are not quantized types
        try:
            gguf.quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), kind)
        except (NotImplementedError, ValueError, KeyError):
            continue
        found.add(kind.name)
    return frozenset(found)


def requantized_bits(type_name: str) -> int:
    """4 bits for a type of at most 5 bits per weight (Q4_K, Q3_K, IQ4_XS …), else 8 (Q5_K, Q6_K, Q5_0 …)."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    return 4 if size * 8 / block <= 5 else 8


def tensor_bytes(t) -> int:
    import gguf

    kind = gguf.GGMLQuantizationType(t.type_id)
    block, size = gguf.GGML_QUANT_SIZES[kind]
    n = 1
    for d in t.shape:
        n *= d
    return n // block * size


def floats(data, t):
    """Tensor ``t`` (a ``gguf_header.TensorInfo``) of the file mapped as ``data`` (uint8), as float32
    numpy, dequantized by the gguf package where it is quantized."""
    import gguf
    import numpy as np

    kind = gguf.GGMLQuantizationType(t.type_id)
    raw = data[t.offset:t.offset + tensor_bytes(t)]
    if kind == gguf.GGMLQuantizationType.F32:
        return raw.view(np.float32).reshape(t.shape)
    if kind == gguf.GGMLQuantizationType.F16:
        return raw.view(np.float16).astype(np.float32).reshape(t.shape)
    rows = raw.reshape(-1, tensor_bytes(t) // max(1, _rows(t.shape)))
    return gguf.quants.dequantize(rows, kind).astype(np.float32, copy=False).reshape(t.shape)


def _rows(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape[:-1]:
        n *= d
    return n


def quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """A matrix (or a stack of expert matrices) whose rows split into whole groups."""
    return name.endswith(".weight") and len(shape) >= 2 and shape[-1] % GROUP_SIZE == 0


def convert_tensors(path: Path, tensors: list, form: str, rename: Callable[[str], str],
                    adjust: Callable[[str, object], list],
                    widen: Callable[[str], bool] = lambda name: False,
                    requantize: Callable[[str], bool] = lambda name: True) -> Iterator[tuple[str, dict]]:
    """(MLX module name, {suffix: array}) per tensor of ``path`` (``tensors``: its table, from
    ``gguf_header.read_header``), in file order. ``rename`` maps a GGUF name to an MLX one (raising on an
    unknown tensor); ``adjust(mlx_name, float32 numpy)`` applies what the architecture changes about a float
    tensor (Gemma's norms), returning the (name, array) pairs to write: none while it holds a tensor to join
    with a later one; ``widen(mlx_name)``: a tensor to widen even where its blocks could be kept;
    ``requantize(mlx_name)``: whether a widened matrix may be requantized (else it stays float16)."""
    import mlx.core as mx
    import numpy as np

    data = np.memmap(path, dtype=np.uint8, mode="r")
    native = {}
    if form == "quantized" and any(t.type in MLX_NATIVE for t in tensors):
        # mlx reads the whole file at once; what it widened (other types) is dropped at once. A file mixing
        # in a type mlx cannot read at all (the IQ types) has every tensor requantized instead.
        try:
            loaded = mx.load(str(path))
        except (RuntimeError, ValueError) as exc:
            log.info("%s: mlx cannot read this file (%s): Q4_0/Q4_1/Q8_0 tensors are requantized too",
                     path.name, exc)
            loaded = {}
        for t in tensors:
            stem = t.name[:-len(".weight")]
            if t.type in MLX_NATIVE and f"{stem}.scales" in loaded and not widen(rename(t.name)):
                native[t.name] = (loaded[t.name], loaded[f"{stem}.scales"], loaded[f"{stem}.biases"])
        del loaded
    dtype = {"float32": mx.float32, "float16": mx.float16}.get(form)
    progress = _Progress(path.name, tensors)
    for t in tensors:
        if t.name in native:
            w, scales, biases = native.pop(t.name)
            out = {"weight": w, "scales": scales, "biases": biases}
            mx.eval(out)
            yield rename(t.name).rpartition(".")[0], out
        else:
            for name, a in adjust(rename(t.name), floats(data, t)):
                module, _, suffix = name.rpartition(".")
                out = _widened(mx.array(a), name, suffix, t.type, dtype, requantize(name))
                mx.eval(out)
                yield module, out
        progress.done(t)


def _widened(w, name: str, suffix: str, type_name: str, dtype, requantize: bool) -> dict:
    """A float tensor as the form stores it: the form's float type; else a float type as it was, a
    quantizable matrix requantized, anything else float16."""
    import mlx.core as mx

    if dtype is not None:
        return {suffix: w.astype(dtype)}
    if type_name in FLOATS:
        return {suffix: w.astype({"F16": mx.float16, "BF16": mx.bfloat16}.get(type_name, mx.float32))}
    if requantize and quantizable(name, w.shape):
        q, scales, biases = mx.quantize(w, group_size=GROUP_SIZE, bits=requantized_bits(type_name))
        return {"weight": q, "scales": scales.astype(mx.float16), "biases": biases.astype(mx.float16)}
    return {suffix: w.astype(mx.float16)}


class _Progress:
    """The conversion's progress by bytes: a bar on a terminal, else a log line every few seconds
    (tinytitan/progress.py), saying tensors and megabytes."""

    def __init__(self, filename: str, tensors: list):
        from ..progress import Progress

        self.filename, self.total, self.count = filename, sum(tensor_bytes(t) for t in tensors) or 1, len(tensors)
        self.read, self.n = 0, 0
        self.bar = Progress(log, f"converting {filename}", self.total, unit="B", every=PROGRESS_EVERY_S,
                            line=self._line, ends=False)

    def _line(self, fraction: float, elapsed: float) -> str:
        return (f"converting {self.filename}: {100 * fraction:3.0f}% ({self.n} of {self.count} tensors, "
                f"{self.read / 1e6:.0f} of {self.total / 1e6:.0f} MB, {elapsed:.0f}s)")

    def done(self, t) -> None:
        self.read, self.n = self.read + tensor_bytes(t), self.n + 1
        self.bar.update(tensor_bytes(t))
        if self.n == self.count:
            self.bar.close()


class ShardWriter:
    """Collects arrays and writes ``model-NNNNN.safetensors`` files of about ``limit`` bytes each, plus the
    index Hugging Face's loaders read (mlx-lm reads every ``model*.safetensors``)."""

    def __init__(self, out: Path, limit: int | None = None):
        self.out, self.limit = out, limit or SHARD_BYTES
        self.pending: dict = {}
        self.pending_bytes = 0
        self.files: list[str] = []
        self.weight_map: dict[str, str] = {}
        self.total = 0

    def add(self, name: str, array) -> None:
        self.pending[name] = array
        self.pending_bytes += array.nbytes
        self.total += array.nbytes
        if self.pending_bytes >= self.limit:
            self.flush()

    def flush(self) -> None:
        import mlx.core as mx

        if not self.pending:
            return
        filename = f"model-{len(self.files) + 1:05d}.safetensors"
        try:
            mx.save_safetensors(str(self.out / filename), self.pending, metadata={"format": "mlx"})
        except RuntimeError as exc:  # mlx's writer says a failed write (a full disk) so: the disk's fault
            raise OSError(f"cannot write {self.out / filename}: {exc}") from exc
        self.files.append(filename)
        self.weight_map.update(dict.fromkeys(self.pending, filename))
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        self.flush()
        index = {"metadata": {"total_size": self.total}, "weight_map": dict(sorted(self.weight_map.items()))}
        (self.out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
