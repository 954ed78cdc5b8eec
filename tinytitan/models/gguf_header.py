"""The GGUF header: the metadata and each tensor's storage type, read without loading a weight.

``mlx.core.load`` reads a GGUF's tensors, but converts every storage type it cannot keep quantized (the
K-quants, the IQ types …) to floats without saying so. The converter decides per tensor instead — kept in
mlx's affine layout (Q4_0, Q4_1, Q8_0), dequantized by the ``gguf`` package (the K-quants, the IQ types and
every other type it reads; ``gguf_tensors.py``), or refused by name (a type nothing here reads) — so it reads
the tensor table here first. Layout (GGUF v2/v3, little-endian): magic ``GGUF``, version u32,
tensor count u64, metadata count u64, the metadata (key, type, value), then per tensor its name, dims, type
and offset.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

# ggml's tensor storage types (ggml.h, enum ggml_type)
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
    19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}

# metadata value types: struct format of the scalars; 8 is a string, 9 an array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def type_name(ttype: int) -> str:
    """ggml's name for a storage type; one newer than this table, as the installed gguf package names it."""
    if ttype in GGML_TYPES:
        return GGML_TYPES[ttype]
    try:
        import gguf

        return gguf.GGMLQuantizationType(ttype).name
    except (ImportError, ValueError):
        return f"type {ttype}"


class GGUFError(ValueError):
    """The file is not a GGUF this reader understands."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # row-major (numpy) order
    type: str
    offset: int = 0  # from the start of the file
    type_id: int = 0


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def scalar(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.scalar("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_string(self) -> None:
        self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]

    def value(self, vtype: int, keep_arrays: bool):
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.scalar("<I"), self.scalar("<Q")
            if keep_arrays:
                return [self.value(etype, True) for _ in range(count)]
            if etype in _SCALARS:
                self.pos += struct.calcsize(_SCALARS[etype]) * count
            elif etype == _STRING:
                for _ in range(count):
                    self.skip_string()
            else:
                for _ in range(count):
                    self.value(etype, False)
            return None
        raise GGUFError(f"unknown GGUF metadata value type {vtype}")


def read_header(path: str | Path, keep_arrays: bool = False) -> tuple[dict, list[TensorInfo]]:
    """(metadata, tensor table). Array values (the vocabulary, merges, scores) are ``None`` unless
    ``keep_arrays``. Each tensor's ``offset`` is where its data starts in the file (after the header, aligned
    to ``general.alignment``, 32 by default)."""
    try:
        return _read_header(path, keep_arrays)
    except GGUFError:
        raise
    except (struct.error, ValueError, OverflowError, MemoryError) as exc:  # a truncated or damaged file
        raise GGUFError(f"{path}: damaged or truncated GGUF header (an incomplete download?): {exc}") from None


def _read_header(path: str | Path, keep_arrays: bool) -> tuple[dict, list[TensorInfo]]:
    if Path(path).stat().st_size < 4:
        raise GGUFError(f"{path} is not a GGUF file (no GGUF magic)")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise GGUFError(f"{path} is not a GGUF file (no GGUF magic)")
        r = _Reader(buf)
        r.pos = 4
        version = r.scalar("<I")
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
        n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
        meta = {}
        for _ in range(n_kv):
            key = r.string()
            vtype = r.scalar("<I")
            meta[key] = r.value(vtype, keep_arrays=keep_arrays or vtype != _ARRAY)
        table = []
        for _ in range(n_tensors):
            name = r.string()
            dims = tuple(r.scalar("<Q") for _ in range(r.scalar("<I")))
            ttype = r.scalar("<I")
            table.append((name, tuple(reversed(dims)), ttype, r.scalar("<Q")))
        align = int(meta.get("general.alignment") or 32)
        start = -(-r.pos // align) * align
        tensors = [TensorInfo(name, shape, type_name(t), start + off, t) for name, shape, t, off in table]
        for t in tensors:
            end = t.offset + data_bytes(t)
            if end > len(buf):
                raise GGUFError(f"{path}: truncated: tensor {t.name}'s data ends at byte {end}, past the end of "
                                f"the file ({len(buf)} bytes; an incomplete download?)")
        return meta, tensors


def data_bytes(t: TensorInfo) -> int:
    """The bytes a tensor's data takes in the file (0 for a type the gguf package does not know)."""
    try:
        import gguf

        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.type_id)]
    except (ImportError, ValueError, KeyError):
        return 0
    n = 1
    for d in t.shape:
        n *= d
    return n // block * size
