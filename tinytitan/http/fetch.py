"""Remote images, fetched only where the operator turned it on (``tinytitan serve --fetch-images``).

Rules:
- Off by default: a remote ``http(s)`` image URL is then refused by name (tinytitan/images.py). Fetching makes
  the server reach whatever host a client names: turn it on only where every client is trusted.
- Each protocol's spec lists where its image URLs stand (``extra.image_urls``: ``messages[].content[].
  image_url.url`` …). Before a body is validated, every remote URL there is fetched — concurrently, at most
  ``CONCURRENCY`` at a time, ``MAX_IMAGES`` in all, a URL standing in several places once — on the event loop with
  httpx (never blocking it), and replaced by a ``data:`` URL of what came back, so the protocols only ever read
  data URLs.
- Limits per image: ``TIMEOUT_SECONDS`` for the whole fetch (connect, redirects — at most ``MAX_REDIRECTS`` —
  and body), ``images.MAX_BYTES`` of body (the download stops there). A fetch that fails, times out, is over the
  limit, or answers other than 200 is a 400 naming the part (``image_url_fetch_failed``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Iterator

import httpx
import trio

from .. import images
from ..errors import ApiError
from ..images import ImageError
from ..protocols.base import OFF_LOOP_BYTES
from ..protocols.wire import Call
from ..speclang.json_text import request_body
from . import encoding

TIMEOUT_SECONDS = 10.0
MAX_REDIRECTS = 3
CONCURRENCY = 4


def _slots(doc, path: list[str], where: str = "") -> Iterator[tuple[object, object, str]]:
    """(container, key, where) for every value at ``path`` (``a[].b``: every element of list ``a``, then ``b``)."""
    if not path:
        return
    step, rest = path[0], path[1:]
    name, each = (step[:-2], True) if step.endswith("[]") else (step, False)
    if not isinstance(doc, dict) or name not in doc:
        return
    here = f"{where}.{name}" if where else name
    if not each:
        if rest:
            yield from _slots(doc[name], rest, here)
        else:
            yield doc, name, here
        return
    if isinstance(doc[name], list):
        for i, item in enumerate(doc[name]):
            if rest:
                yield from _slots(item, rest, f"{here}[{i}]")
            else:
                yield doc[name], i, f"{here}[{i}]"


def remote_urls(doc, paths: list[str]) -> list[tuple[object, object, str, str]]:
    """(container, key, where, url) for every remote URL at the declared paths of a parsed body."""
    found = []
    for path in paths:
        for container, key, where in _slots(doc, path.split(".")):
            value = container[key]
            if isinstance(value, str) and images.is_remote(value):
                found.append((container, key, where[: where.rindex("]") + 1] if "]" in where else where,
                              value.strip()))
    return found


async def fetch_image(client: httpx.AsyncClient, url: str, where: str) -> str:
    """One remote image as a data URL, within the limits (see the rules)."""
    def failed(why: str) -> ImageError:
        return ImageError(f"could not fetch the image at {url[:200]}: {why}", where, "image_url_fetch_failed")

    with trio.move_on_after(TIMEOUT_SECONDS) as scope:
        try:
            async with client.stream("GET", url) as r:
                if r.status_code != 200:
                    raise failed(f"the server answered {r.status_code}")
                declared = r.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > images.MAX_BYTES:
                    raise failed(f"image exceeds {images.MAX_BYTES} bytes maximum ({declared} bytes)")
                # the body as sent (a Content-Encoding undone below, within the limit: a few KB of zstd or brotli
                # would otherwise inflate to gigabytes in one chunk before any limit is checked)
                data = bytearray()
                async for chunk in r.aiter_raw():
                    data += chunk
                    if len(data) > images.MAX_BYTES:
                        raise failed(f"image exceeds {images.MAX_BYTES} bytes maximum")
                media = r.headers.get("content-type", "").split(";")[0].strip().lower()
                # (a coding no decoder knows, "none" or "binary" from a misconfigured server, is skipped as httpx
                # skips it: the bytes then say whether they are an image)
                known = [c for c in encoding.codings(r.headers.get("content-encoding")) if c in encoding.DECODERS]
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:  # (a URL httpx cannot read)
            raise failed(f"{type(exc).__name__}: {exc}"[:200]) from None
    if scope.cancelled_caught:
        raise failed(f"no answer within {TIMEOUT_SECONDS:g} s")
    if known:  # on a thread, never asked for more than the limit (encoding.py)
        coding = ", ".join(known)
        try:
            data = await trio.to_thread.run_sync(encoding.decode, bytes(data), coding, images.MAX_BYTES)
        except ApiError as exc:
            raise failed(f"image exceeds {images.MAX_BYTES} bytes maximum once decoded"
                         if exc.kind == "request_too_large" else
                         f"the image's body is not the {coding} data its Content-Encoding says") from None
    media = media if media in images.MEDIA_TYPES else ""  # the bytes say what it is (images.inspect)
    return f"data:{media};base64,{base64.b64encode(bytes(data)).decode()}"


async def with_fetched_images(call: Call, paths: list[str]) -> Call:
    """``call`` with every remote image URL at ``paths`` fetched and replaced by a data URL (the same call when
    there is none, or the body is not JSON: validation says what is wrong with it)."""
    # (a shortcut for the bodies that hold no URL: a scheme in any case, or spelt with JSON escapes, is one)
    if not paths or (b"http" not in call.body.lower() and b"\\u" not in call.body):
        return call
    # read as validation reads it, a large body off the event loop; one it refuses is left to it to refuse by name
    doc = _as_validated(call.body) if len(call.body) < OFF_LOOP_BYTES else \
        await trio.to_thread.run_sync(_as_validated, call.body)
    if doc is None:
        return call
    found = remote_urls(doc, paths)
    if not found:
        return call
    if len(found) > images.MAX_IMAGES:
        where = found[images.MAX_IMAGES][2]
        raise ImageError(f"too many images in one request: more than {images.MAX_IMAGES} remote image URLs",
                         where, "too_many_images", limit=images.MAX_IMAGES)
    limit = trio.CapacityLimiter(CONCURRENCY)
    fetched: dict[str, str] = {}
    first: dict[str, str] = {}  # each URL once, named by its first place (a screenshot sent again in the history)
    for _, _, where, url in found:
        first.setdefault(url, where)

    async def one(url: str, where: str) -> None:
        async with limit:
            fetched[url] = await fetch_image(client, url, where)

    async with httpx.AsyncClient(follow_redirects=True, max_redirects=MAX_REDIRECTS,
                                 timeout=TIMEOUT_SECONDS, trust_env=False) as client:
        try:
            async with trio.open_nursery() as nursery:
                for url, where in first.items():
                    nursery.start_soon(one, url, where)
        except BaseExceptionGroup as group:  # the first refusal speaks for the request
            raise next(e for e in _leaves(group)) from None
    for container, key, _, url in found:
        container[key] = fetched[url]
    return replace(call, body=json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _as_validated(body: bytes):
    """The body as validation parses it (strict UTF-8 and JSON: a lone surrogate made U+FFFD, so the body written
    back encodes); None where validation refuses it (too many containers, NaN, a number past a double, …)."""
    try:
        return request_body(body.decode("utf-8-sig"))
    except (ApiError, ValueError, RecursionError):
        return None


def _leaves(group: BaseExceptionGroup):
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc
