"""K-quant blocks made from known floats, for the tests: the ``gguf`` package dequantizes Q4_K and Q6_K but
cannot write them, so the tests write them here, in ggml's block layout (ggml-common.h: ``block_q4_K``,
``block_q6_K``), with a plain quantizer (scales rounded up so no code clips; not llama.cpp's search for the best
scales: the blocks are valid, only a little less accurate). What the converter reads back is checked against ``gguf.quants``'s own
dequantizer, so a layout wrong here fails there.
"""

from __future__ import annotations

import numpy as np

QK_K = 256


def q4_k(x: np.ndarray) -> np.ndarray:
    """float32 (..., n·256) -> Q4_K blocks (..., n·144) as uint8: per 32 values a 6-bit scale and min under
    the block's f16 ``d`` and ``dmin``, and 4-bit codes."""
    shape = x.shape
    blocks = x.reshape(-1, 8, 32).astype(np.float32)
    safe = lambda a: np.where(a == 0, 1.0, a)  # noqa: E731
    half = lambda a: (a * (1 + 1e-3)).astype(np.float16)  # noqa: E731  (rounded up: the codes never clip)
    mins = -np.minimum(blocks.min(axis=2), 0.0)
    dmin = half(mins.max(axis=1) / 63.0)
    m = np.clip(np.ceil(mins / safe(dmin.astype(np.float32))[:, None]), 0, 63).astype(np.uint8)
    m1 = dmin.astype(np.float32)[:, None] * m
    step = (blocks.max(axis=2) + m1) / 15.0  # the grid from -m1 reaches the largest value
    d = half(step.max(axis=1) / 63.0)
    sc = np.clip(np.ceil(step / safe(d.astype(np.float32))[:, None]), 0, 63).astype(np.uint8)
    d1 = d.astype(np.float32)[:, None] * sc
    q = np.clip(np.round((blocks + m1[..., None]) / safe(d1)[..., None]), 0, 15).astype(np.uint8)
    scales = np.zeros((len(blocks), 12), np.uint8)
    for j in range(4):
        scales[:, j] = sc[:, j] | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = m[:, j] | ((m[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 0xF) | ((m[:, j + 4] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(len(blocks), 128)  # sub-blocks 2j, 2j+1 share bytes
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales, qs], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 144)


def q6_k(x: np.ndarray) -> np.ndarray:
    """float32 (..., n·256) -> Q6_K blocks (..., n·210): per 16 values an int8 scale under the block's f16
    ``d``, and 6-bit codes split into low nibbles (``ql``) and high bit pairs (``qh``)."""
    shape = x.shape
    blocks = x.reshape(-1, 16, 16).astype(np.float32)
    step = np.abs(blocks).max(axis=2) / 31.0
    d = (step.max(axis=1) / 127.0 * (1 + 1e-3)).astype(np.float16)  # rounded up: the codes never clip
    safe = lambda a: np.where(a == 0, 1.0, a)  # noqa: E731
    sc = np.clip(np.ceil(step / safe(d.astype(np.float32))[:, None]), 0, 127).astype(np.int8)
    d1 = d.astype(np.float32)[:, None] * sc
    u = (np.clip(np.round(blocks / safe(d1)[..., None]), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)
    ql = np.zeros((len(blocks), 2, 64), np.uint8)
    ql[:, :, :32] = (u[:, :, 0:32] & 0xF) | ((u[:, :, 64:96] & 0xF) << 4)
    ql[:, :, 32:] = (u[:, :, 32:64] & 0xF) | ((u[:, :, 96:128] & 0xF) << 4)
    qh = ((u[:, :, 0:32] >> 4) | ((u[:, :, 32:64] >> 4) << 2) | ((u[:, :, 64:96] >> 4) << 4)
          | ((u[:, :, 96:128] >> 4) << 6)).astype(np.uint8)
    out = np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8),
                          d.view(np.uint8).reshape(-1, 2)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 210)


ENCODERS = {"Q4_K": q4_k, "Q6_K": q6_k}


def step_bound(x: np.ndarray, kind: str) -> float:
    """The largest rounding step a block of ``x`` gets: no value reads back further than one step off."""
    if kind == "Q4_K":
        b = x.reshape(-1, 32)
        return float(((b.max(axis=1) - np.minimum(b.min(axis=1), 0)) / 15).max() * 1.1)
    b = x.reshape(-1, 16)
    return float((np.abs(b).max(axis=1) / 31).max() * 1.1)


def random_blocks(kind, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Blocks of any type of random content whose every f16 field is finite and small: every byte is below
    0x3C, so a half float's exponent stays under 15 (|value| < 1). Grid indices and sign bits take any value."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[kind]
    rng = np.random.default_rng(seed)
    return rng.integers(0, 0x3C, size=(rows, cols // block * size), dtype=np.uint8)
