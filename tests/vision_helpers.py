"""The vision tests' helpers: a solid image, an image part, a request that asks about images, one decode through
a backend, the demo vision backend (a module-scoped fixture), and the engine's logits at a row's cache."""

from __future__ import annotations

import hashlib
import io

import pytest

from tinytitan.chat_request import ChatRequest, ImagePart, Message
from tinytitan.engine.decode.token_events import DecodeLoop


def png(color, size=(64, 48), fmt="PNG") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt)
    return out.getvalue()


def part(data: bytes, where: str = "messages[0].content[0]") -> ImagePart:
    return ImagePart(data, "image/png", hashlib.sha256(data).hexdigest(), where)


def ask(*parts, history=(), model="demo-vision", **kw) -> ChatRequest:
    text = "".join(p for p in parts if isinstance(p, str))
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 6)
    return ChatRequest(model=model, messages=(*history, Message("user", text, parts=tuple(parts))), **kw)


def decode(backend, req: ChatRequest):
    prepared = backend.prepare(req)
    events = []
    loop = DecodeLoop(backend.parser(prepared), (), events.append, prepared.sampling)
    backend.decode(prepared, loop, lambda: False)
    return prepared, events


@pytest.fixture(scope="module")
def vision():
    from tinytitan.demo_model.vision import MODEL_ID, ensure_demo_vision
    from tinytitan.engine.backends.vision import VisionBackend, backend_class

    path = ensure_demo_vision()
    assert backend_class(path) is VisionBackend
    return VisionBackend(path, MODEL_ID)


RED, BLUE = png((255, 0, 0)), png((0, 0, 255))


def engine_logits(backend, prepared, follow):
    """The engine's reading (``prompt_prefix``: cache, images) and then mlx-lm's model at its cache offset, as the
    decoder's step runs it."""
    import mlx.core as mx

    model = backend.ensure_loaded()
    kv, read, _ = backend.prompt_prefix(model, prepared)
    kv = kv if kv is not None else backend.new_cache(model)
    out = [model(mx.array(prepared.tokens[read:])[None], cache=kv)[0, -1]]
    for token in follow:
        out.append(model(mx.array([[token]]), cache=kv)[0, -1])
    return out, kv
