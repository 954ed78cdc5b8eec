"""Compressed request bodies on every route: ``Content-Encoding`` zstd, gzip, deflate and br are decoded before
parsing; the body limit applies to the decoded size (a bomb is 413 without being inflated whole); an unknown
or corrupt encoding is 415 / 400 in the protocol's own envelope, naming Content-Encoding."""

from __future__ import annotations

import gzip
import json
import zlib

import brotli
import httpx
import pytest
import zstandard

import strict

ENCODERS = {
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "gzip, zstd": lambda b: zstandard.ZstdCompressor().compress(gzip.compress(b)),
}

ROUTES = {  # path → (body, envelope)
    "/v1/responses": ({"model": "tinytitan-scripted", "input": "hi", "store": False}, "openai"),
    "/v1/chat/completions": ({"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}]},
                             "openai"),
    "/v1/completions": ({"model": "tinytitan-scripted", "prompt": "hi"}, "openai"),
    "/v1/messages": ({"model": "tinytitan-scripted", "max_tokens": 50,
                      "messages": [{"role": "user", "content": "hi"}]}, "anthropic"),
    "/v1/messages/count_tokens": ({"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}]},
                                  "anthropic"),
    "/api/chat": ({"model": "tinytitan-scripted", "stream": False, "messages": [{"role": "user", "content": "hi"}]},
                  "ollama"),
}


def _envelope_error(envelope: str, r: httpx.Response) -> str:
    body = r.json()
    if envelope == "openai":
        strict.openai_error(body)
        assert body["error"]["param"] == "Content-Encoding", body
        return body["error"]["message"]
    if envelope == "anthropic":
        strict.anthropic_error(body)
        return body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("coding", ENCODERS)
async def test_a_compressed_body_is_answered_as_the_plain_one(serve, coding):
    server = await serve(["Hello there."])
    async with httpx.AsyncClient() as client:
        for path, (body, _) in ROUTES.items():
            raw = json.dumps(body).encode()
            plain = await client.post(server.url(path), content=raw, headers={"content-type": "application/json"})
            packed = await client.post(server.url(path), content=ENCODERS[coding](raw),
                                       headers={"content-type": "application/json", "content-encoding": coding})
            assert plain.status_code == packed.status_code == 200, (path, packed.text)
            if path != "/v1/messages/count_tokens":
                assert "Hello there." in packed.text
            else:
                assert packed.json() == plain.json()


@pytest.mark.parametrize("coding", ["zstd", "gzip", "deflate", "br"])
async def test_a_decompression_bomb_is_413_once_past_the_limit(serve, coding):
    limit = 1 << 20
    server = await serve(["hi"], max_body_bytes=limit)
    bomb = ENCODERS[coding](b"{" + b" " * (16 << 20))  # 16 MiB of output from a few kB
    assert len(bomb) < limit
    async with httpx.AsyncClient() as client:
        for path in ["/v1/responses", "/v1/messages", "/api/chat"]:
            r = await client.post(server.url(path), content=bomb,
                                  headers={"content-type": "application/json", "content-encoding": coding})
            assert r.status_code == 413, r.text
            message = _envelope_error(ROUTES[path][1], r)
            assert f"larger than {limit} bytes once decoded" in message and "Content-Encoding" in message


async def test_an_unknown_encoding_is_415_naming_it(serve):
    server = await serve(["hi"])
    async with httpx.AsyncClient() as client:
        for path, (body, envelope) in ROUTES.items():
            r = await client.post(server.url(path), content=json.dumps(body).encode(),
                                  headers={"content-type": "application/json", "content-encoding": "gzip, lzma"})
            assert r.status_code == 415, r.text
            assert "Content-Encoding 'lzma' is not supported" in _envelope_error(envelope, r)


@pytest.mark.parametrize("coding", ["zstd", "gzip", "deflate", "br"])
async def test_a_corrupt_body_is_400_naming_the_encoding(serve, coding):
    server = await serve(["hi"])
    async with httpx.AsyncClient() as client:
        for path in ["/v1/responses", "/v1/messages", "/api/chat"]:
            packed = ENCODERS[coding](json.dumps(ROUTES[path][0]).encode())
            for sent in (packed[: len(packed) // 2], b"\x01\x02 not compressed at all"):
                r = await client.post(server.url(path), content=sent,
                                      headers={"content-type": "application/json", "content-encoding": coding})
                assert r.status_code == 400, r.text
                message = _envelope_error(ROUTES[path][1], r)
                assert f"not valid '{coding}' data (Content-Encoding)" in message


async def test_identity_and_an_empty_encoding_change_nothing(serve):
    server = await serve(["Hello there."])
    body = json.dumps(ROUTES["/v1/responses"][0]).encode()
    async with httpx.AsyncClient() as client:
        for header in ("identity", "", "Identity"):
            r = await client.post(server.url("/v1/responses"), content=body,
                                  headers={"content-type": "application/json", "content-encoding": header})
            assert r.status_code == 200, (header, r.text)
