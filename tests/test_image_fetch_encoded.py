"""A fetched image is bounded by images.MAX_BYTES of *decoded* body: a server that answers with a compressed
body (Content-Encoding: zstd/br/gzip) must not make tinytitan inflate more than that."""

from __future__ import annotations

import base64
import gzip
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import brotli
import httpx
import pytest
import zstandard

from tinytitan import images
from tinytitan.http import fetch
from tinytitan.images import ImageError

PNG = b"\x89PNG\r\n\x1a\n" + b"x" * 100

ZSTD_BOMB = zstandard.ZstdCompressor(level=3).compress(b"\0" * (256 << 20))  # ~8 KB → 256 MiB
BR_BOMB = brotli.compress(b"\0" * (256 << 20), quality=5)  # ~400 bytes → 256 MiB


@pytest.fixture
def bomb_host():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            coding, data = {"/z.png": ("zstd", ZSTD_BOMB), "/b.png": ("br", BR_BOMB),
                            "/ok.png": ("gzip", gzip.compress(PNG)), "/none.png": ("none", PNG),
                            "/torn.png": ("gzip", gzip.compress(PNG)[:-12])}[self.path]
            try:
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Encoding", coding)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.parametrize("path", ["/z.png", "/b.png"])
async def test_a_compressed_image_is_not_inflated_past_the_limit(bomb_host, path):
    tracemalloc.start()
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            with pytest.raises(ImageError) as err:
                await fetch.fetch_image(client, bomb_host + path, "messages[0].content[0]")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "exceeds" in str(err.value)
    assert peak < 4 * images.MAX_BYTES, f"inflated {peak >> 20} MiB to refuse a {images.MAX_BYTES >> 20} MiB image"


async def test_a_compressed_image_within_the_limit_is_decoded(bomb_host):
    async with httpx.AsyncClient(trust_env=False) as client:
        url = await fetch.fetch_image(client, bomb_host + "/ok.png", "messages[0].content[0]")
    assert url == "data:image/png;base64," + base64.b64encode(PNG).decode()


async def test_a_coding_no_decoder_knows_is_skipped_as_httpx_skips_it(bomb_host):
    async with httpx.AsyncClient(trust_env=False) as client:
        url = await fetch.fetch_image(client, bomb_host + "/none.png", "messages[0].content[0]")
    assert url == "data:image/png;base64," + base64.b64encode(PNG).decode()


async def test_a_body_that_is_not_its_coding_is_refused_as_the_images(bomb_host):
    async with httpx.AsyncClient(trust_env=False) as client:
        with pytest.raises(ImageError) as err:
            await fetch.fetch_image(client, bomb_host + "/torn.png", "messages[0].content[0]")
    assert "the image's body is not the gzip data its Content-Encoding says" in str(err.value), str(err.value)
