"""Compressed request bodies (``Content-Encoding``), decoded before anything parses them.

Rules:
- ``zstd`` (zstandard), ``gzip`` and ``deflate`` (zlib; a raw deflate stream is taken too, as some clients send
  one), ``br`` (brotli) and ``identity``; a list (``gzip, zstd``) is undone last-applied first.
- The body limit applies to the *decoded* size: a decoder is never asked for more than one byte past it, so a
  decompression bomb is a 413 after at most the limit's worth of output, never inflated whole.
- An encoding not in the list is 415 and a body that does not decode (corrupt, or cut short) is 400; both
  name ``Content-Encoding`` (the caller answers in the protocol's envelope).
"""

from __future__ import annotations

import zlib

import brotli
import zstandard

from ..errors import ApiError

ENCODINGS = ("zstd", "gzip", "deflate", "br", "identity")
ZSTD_CHUNK = 1024  # compressed bytes fed to zstd at a time: one chunk inflates to at most ~44 MB (RLE blocks)


class _TooLarge(Exception):
    pass


class _Corrupt(Exception):
    pass


def _zstd(raw: bytes, limit: int) -> bytes:
    out = bytearray()
    dctx = zstandard.ZstdDecompressor()
    while raw:  # one frame after another (a body may hold several)
        obj, rest = dctx.decompressobj(), b""
        for start in range(0, len(raw), ZSTD_CHUNK):
            try:
                out += obj.decompress(raw[start:start + ZSTD_CHUNK])
            except zstandard.ZstdError as exc:
                raise _Corrupt(str(exc)) from None
            if len(out) > limit:
                raise _TooLarge
            if obj.eof:
                rest = obj.unused_data + raw[start + ZSTD_CHUNK:]
                break
        if not obj.eof:
            raise _Corrupt("the zstd frame is cut short")
        raw = rest
    return bytes(out)


def _zlib(raw: bytes, limit: int, wbits: int) -> bytes:
    out = bytearray()
    while raw:
        d = zlib.decompressobj(wbits)
        try:
            out += d.decompress(raw, limit + 1 - len(out))
        except zlib.error as exc:
            raise _Corrupt(str(exc)) from None
        if len(out) > limit or d.unconsumed_tail:
            raise _TooLarge
        if not d.eof:
            raise _Corrupt("the stream is cut short")
        raw = d.unused_data if wbits != zlib.MAX_WBITS else b""  # gzip: one member after another
    return bytes(out)


def _deflate(raw: bytes, limit: int) -> bytes:
    try:
        return _zlib(raw, limit, zlib.MAX_WBITS)
    except _Corrupt:  # HTTP's deflate is zlib-wrapped; some clients send the bare deflate stream
        return _zlib(raw, limit, -zlib.MAX_WBITS)


def _br(raw: bytes, limit: int) -> bytes:
    d = brotli.Decompressor()
    try:
        out = d.process(raw, output_buffer_limit=limit + 1)
    except brotli.error as exc:
        raise _Corrupt(str(exc)) from None
    if len(out) > limit:
        raise _TooLarge
    if not d.is_finished():
        raise _Corrupt("the brotli stream is cut short")
    return out


DECODERS = {"zstd": _zstd, "gzip": lambda raw, limit: _zlib(raw, limit, 16 + zlib.MAX_WBITS), "x-gzip":
            lambda raw, limit: _zlib(raw, limit, 16 + zlib.MAX_WBITS), "deflate": _deflate, "br": _br}


def codings(header: str | None) -> list[str]:
    """The encodings a ``Content-Encoding`` header names, in the order they were applied (identity left out)."""
    names = [part.strip().lower() for part in (header or "").split(",")]
    return [n for n in names if n and n != "identity"]


def decode(raw: bytes, header: str | None, limit: int) -> bytes:
    """The body as sent before its ``Content-Encoding``: see the rules above."""
    applied = codings(header)
    for name in applied:
        if name not in DECODERS:
            raise ApiError("unsupported_encoding", f"Content-Encoding '{name}' is not supported: send the body "
                           f"uncompressed or as {', '.join(e for e in ENCODINGS if e != 'identity')}",
                           param="Content-Encoding", code="unsupported_content_encoding")
    for name in reversed(applied):
        try:
            raw = DECODERS[name](raw, limit)
        except _TooLarge:
            raise ApiError("request_too_large", f"The request body is larger than {limit} bytes once decoded "
                           f"(Content-Encoding '{name}')", param="Content-Encoding") from None
        except _Corrupt as exc:
            raise ApiError("invalid_request", f"The request body is not valid '{name}' data (Content-Encoding): "
                           f"{exc}", param="Content-Encoding", code="invalid_content_encoding") from None
    return raw
