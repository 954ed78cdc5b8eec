"""The prompt cache's test helpers: a prompt cache with a disk of its own in a directory (disk_cache,
prompt_disk), a short greedy request (demo_request), and an answer's ids as the tokenizer would never make them
(spelled_out_ids), as a weak model's sampling spells it."""

from __future__ import annotations

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.cache.disk import PromptDisk
from tinytitan.engine.cache.disk_files import layout_of


def prompt_disk(backend, directory, max_bytes=1 << 30, layout=None):
    return PromptDisk(directory, sorted(backend.path.glob("*.safetensors")),
                      layout or (lambda: layout_of(backend.ensure_loaded())), max_bytes)


def disk_cache(backend, directory, **kw):
    c = PromptCache(1 << 30)
    c.disk = prompt_disk(backend, directory, **kw)
    return c


def demo_request(msgs, **kw):
    return ChatRequest(model="tinytitan-demo", messages=tuple(Message(r, c) for r, c in msgs), temperature=0,
                       max_tokens=6, **kw)


def spelled_out_ids(tok, text: str) -> list[int]:
    """``text`` as ids the tokenizer would never make of it (a character at a time), as a weak model's
    sampling often spells its answer."""
    ids = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
    assert tok.decode(ids) == text and ids != tok.encode(text, add_special_tokens=False)
    return ids
