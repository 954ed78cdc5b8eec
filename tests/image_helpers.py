"""Image helpers shared by the tests: small images of each format (HEIC's and SVG's first bytes), a PNG of noise,
base64 and data URLs, a scripted backend that reads images (Seeing) and its fixture, a check of the images a
request carried, a raw POST, and loopback hosts of images to fetch (the image_host and counting_host fixtures, the
second counting the GETs per path); write_png: a PNG file of one colour; CLAUDE_CODE_PLACE: how Claude Code finds
the block a media error names."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tinytitan import images
from tinytitan.chat_request import ChatRequest
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry


MODEL = "tinytitan-scripted"


def encoded(fmt: str, size=(8, 6), color=(200, 30, 30), **save) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt, **save)
    return out.getvalue()


def noise(size=(40, 30), seed: int = 1) -> bytes:
    """A PNG of random pixels (the same for a seed): kilobytes that do not compress, where a size matters."""
    import random

    out = io.BytesIO()
    Image.frombytes("RGB", size, random.Random(seed).randbytes(size[0] * size[1] * 3)).save(out, "PNG")
    return out.getvalue()


PNG, JPEG, GIF, WEBP = (encoded(f) for f in ("PNG", "JPEG", "GIF", "WEBP"))
BMP = encoded("BMP")
# what Pillow does not open: an iPhone photo's first bytes (an ISO media file of brand heic) and an SVG
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00\x00\x00\x08mdat"
SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="8" height="6"/>\n'


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{b64(data)}"


class Seeing(ScriptedBackend):
    """A model that reads images (as a vision backend says): keeps every request the engine prepares."""

    takes_images = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[ChatRequest] = []

    def prepare(self, req):
        self.requests.append(req)
        return super().prepare(req)


@pytest.fixture
async def seeing(serve, demo_tok):
    backend = Seeing([ScriptEntry("I see it.")], demo_tok, model_id=MODEL)
    return await serve(backend=backend), backend


def assert_images(req: ChatRequest, expected: list[tuple[bytes, str, str]]) -> None:
    """The request's images are exactly these (bytes, media type, where), in order, with their digests."""
    got = [(p.data, p.media_type, p.where) for p in req.images]
    assert got == expected
    assert all(p.digest == hashlib.sha256(images.PIXELS_VERSION + p.data).hexdigest() for p in req.images)


async def post_json(s, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as h:
        return await h.post(s.url(path), json=body, headers=headers or {})


@pytest.fixture
def image_host():
    """A loopback HTTP server with images (and failures) to fetch → its base URL."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            routes = {"/a.png": (200, "image/png", PNG), "/b.jpg": (200, "image/jpeg; x=1", JPEG),
                      "/text": (200, "text/html", b"<html>not an image</html>"), "/big": (200, "image/png", PNG * 50)}
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", "/a.png")
                self.end_headers()
                return
            if self.path == "/slow":
                time.sleep(3)
            status, kind, data = routes.get(self.path, (404, "text/plain", b"no"))
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server gave up on a slow or oversized answer: what the test checks

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def write_png(path: Path, size: tuple[int, int] = (32, 24), colour: tuple[int, int, int] = (240, 120, 0)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    path.write_bytes(out.getvalue())
    return path


# how Claude Code 2.1.332 finds the block a media error names, to drop it from its history
CLAUDE_CODE_PLACE = re.compile(r"messages[.[](\d+)[\].]+content[.[](\d+)[\].]+"
                               r"(?:tool_result[.[]content[.[](\d+)[\].]+)?(image|document|pdf)")


@pytest.fixture
def counting_host():
    """A loopback HTTP server answering every path with the PNG → (its base URL, the GETs per path)."""
    hits: Counter = Counter()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            hits[self.path] += 1
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()
