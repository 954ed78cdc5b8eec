"""The prompt cache's files on disk: their format and metadata, where they live, the model layout a file is valid
for, the snapshot of a KV cache that is written, and the directory's bytes (tallied, counted, evicted)."""

from __future__ import annotations

import base64
import hashlib
import heapq
import json
import logging
import os
import re
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..prompt.splice import Span
from .entries import gives_way_by_prompt, lasting_part

log = logging.getLogger("tinytitan.cache")


FORMAT = "tinytitan-prompt-cache/2"


# earlier formats of this cache: their files can never be read again (version 1 named the weights by another
# digest), so a scan removes them rather than leaving them to fill the disk
SUPERSEDED = ("tinytitan-prompt-cache/1",)


SUFFIX = ".safetensors"


def default_dir() -> Path:
    """``$TINYTITAN_PROMPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tinytitan/prompt-cache`` (``~/.cache`` where unset)."""
    if os.environ.get("TINYTITAN_PROMPT_CACHE_DIR"):
        return Path(os.environ["TINYTITAN_PROMPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tinytitan" / "prompt-cache"


def owners_only(path: Path, mode: int) -> None:
    """``path`` made the owner's only where this user may (a file another user wrote in a shared folder, a mount
    that keeps no modes, a read-only volume: left as it is, and still read)."""
    try:
        os.chmod(path, mode)
    except OSError as exc:
        log.warning("prompt cache on disk: %s could not be made the owner's only (%s)", path.name, exc)


def read_metadata(path: Path) -> dict:
    """The ``__metadata__`` of a safetensors file, from its header alone (8-byte length, then JSON)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 64 << 20:
            raise ValueError("header too large")
        header = json.loads(f.read(n))
    # save_prompt_cache flattens [metadata, classes, scalars]: the metadata's keys come first, as "0.<key>"
    return {k[2:]: v for k, v in (header.get("__metadata__") or {}).items() if k.startswith("0.")}


def _plain(value: Any) -> Any:
    """A configuration value JSON cannot write, as something it can that is the same in every process (no
    object addresses, no set order)."""
    if isinstance(value, (set, frozenset)):
        return sorted(map(repr, value))
    if hasattr(value, "__dict__"):
        return {"type": type(value).__name__, **vars(value)}
    return f"{type(value).__name__}:{value!r}" if "0x" not in repr(value) else type(value).__name__


def layout_of(model: Any, kv_bits: int | None = None, images: str | None = None) -> str:
    """What a KV cache of this model looks like: the cache classes per layer, KV heads and widths, dtype, KV
    bits, and a digest of the model's whole configuration (its ``args``: the same weights under another RoPE base
    or scaling compute other keys); for a vision model, ``images``: a digest of what makes an image's tokens and
    embeddings besides the weights (backends/vision.py: the ids key an image by its bytes alone). A file written
    for another layout is never read into this one."""
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_lm

    classes = [type(c).__name__ for c in make_prompt_cache(model)]
    args = getattr(model, "args", None)
    shape = {k: getattr(args, k, None) for k in ("num_key_value_heads", "head_dim", "hidden_size",
                                                  "num_attention_heads", "num_hidden_layers")} if args else {}
    try:
        config = hashlib.sha256(json.dumps(vars(args), sort_keys=True, default=_plain).encode()).hexdigest()[:16]
    except TypeError:  # no args, or args without attributes: the shape alone
        config = None
    try:
        dtype = str(next(iter(_leaves(model.parameters()))).dtype)
    except StopIteration:
        dtype = "?"
    layout = {"classes": classes, "shape": shape, "config": config, "dtype": dtype, "kv_bits": kv_bits,
              "mlx_lm": mlx_lm.__version__}
    if images is not None:  # (a text model's layout as before: its files stay readable)
        layout["images"] = images
    return json.dumps(layout, sort_keys=True)


def _leaves(tree):
    from mlx.utils import tree_flatten

    return (v for _, v in tree_flatten(tree))


def snapshot(kv: list) -> list:
    """Cache objects holding what ``kv`` holds now, on array handles of their own (evaluated here, on the
    model thread, sharing the buffers): the live cache may go on being extended in place (an update of a
    shared buffer copies it first)."""
    import mlx.core as mx
    from mlx.utils import tree_map

    out = [type(c).from_state(tree_map(lambda a: mx.stop_gradient(a) if isinstance(a, mx.array) else a, c.state))
           for c in kv]
    mx.eval([c.state for c in out])
    return out


@dataclass
class OnDisk:
    path: Path
    tokens: np.ndarray
    nbytes: int
    layout: str
    trimmable: bool = True  # its cache can be trimmed back (else it serves only prompts it is wholly a prefix of)
    prompt_tokens: int | None = None  # where its answer starts (None: no answer, or a file that did not say)
    lasting_prompt: int | None = None  # how much of its prompt a later turn repeats (prompt/rendering.py; else all)
    spans: tuple[Span, ...] = ()  # what its ids say (prompt/splice.py), its answer's included
    used: float = 0.0  # when it was written or last read back (its file's mtime)
    kv_bytes: int | None = None  # what its KV takes once read back (None: a file written before it said so)

    def __post_init__(self):
        self.lasting_prompt = lasting_part(self.lasting_prompt, self.prompt_tokens)
        # an answer a prompt can be spliced with (not a file with images: its keys are not ids)
        self.spliceable = any(s.generated for s in self.spans) and not (self.tokens < 0).any()

    def fits(self, budget: int) -> bool:
        """Whether a memory cache of ``budget`` bytes keeps its KV once read back, as far as it says (an older file
        that does not say its size is read to know: once)."""
        return (self.kv_bytes or 0) <= budget


def prompt_tokens(spans) -> int | None:
    """How many ids a file's prompt holds before its answer (its spans: prompt/splice.py), None without an answer."""
    n = 0
    for span in spans:
        if span.generated:
            return n or None
        n += span.tokens
    return None


def answered(f: OnDisk) -> bool:
    """A file holding an answer past its prompt, which a later file may supersede by the part of its prompt a later
    turn repeats: one whose cache can be trimmed back to it."""
    return gives_way_by_prompt(f.trimmable, f.lasting_prompt, f.prompt_tokens, len(f.tokens))


class Tally:
    """A directory's bytes at its last count plus what this process's models wrote and removed there since (None:
    not counted yet). Shared by every ``PromptDisk`` on the directory (``tally_of``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: int | None = None

    def add(self, n: int) -> None:
        with self._lock:
            if self._bytes is not None:
                self._bytes += n

    def within(self, budget: int) -> bool:
        with self._lock:
            return self._bytes is not None and self._bytes <= budget

    def counted(self, total: int) -> None:
        with self._lock:
            self._bytes = total


_TALLIES: dict[str, Tally] = {}
_TALLIES_LOCK = threading.Lock()


def tally_of(directory: Path) -> Tally:
    with _TALLIES_LOCK:
        return _TALLIES.setdefault(os.path.realpath(directory), Tally())


NAME = re.compile(r"[0-9a-f]{40}" + re.escape(SUFFIX))  # a cache file's name, every version's (disk.py ``_name``)


def cache_files(directory: Path) -> list[Path]:
    """The directory's cache files, named as the cache names them: never a temporary one a write is under
    (``.NAME.PID.RANDOM.tmp.safetensors``), nor another file kept there (a model's weights in a folder given by mistake,
    which the budget would otherwise evict, oldest first)."""
    return [p for p in directory.glob("*" + SUFFIX) if NAME.fullmatch(p.name)]


def remove(path: Path) -> str | None:
    """Remove a damaged cache file → what became of it, for the warning; None where it was gone already."""
    try:
        path.unlink()
        return "removed"
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"ignored (it cannot be removed: {err.strerror})"


def evict_lru(directory: Path, budget: int, to: float) -> tuple[int, list[Path]]:
    """Count the directory's cache files (every model's); where they pass ``budget``, remove the least recently
    used (modification time) until they hold ``to`` of it. → (the bytes left, the files removed)."""
    files = []
    for p in cache_files(directory):
        try:
            st = p.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, p))
    total = sum(s for _, s, _ in files)
    goal = budget if total <= budget else int(budget * to)
    gone = []
    for _, size, p in sorted(files):
        if total <= goal:
            break
        try:
            p.unlink()
        except OSError:
            continue
        total -= size
        gone.append(p)
        log.debug("prompt cache on disk: evicted %s (%d bytes)", p.name, size)
    return total, gone


def metadata(digest: str, layout: str, tokens: np.ndarray, spans: tuple[Span, ...], trimmable: bool,
             prompt: int | None, lasting_prompt: int | None, kv_bytes: int) -> dict:
    """A file's header: which model and layout wrote it, its ids and what they say, where its answer starts, what
    its KV takes in memory (a prompt cache with a smaller budget never reads it back)."""
    meta = {"tinytitan_format": FORMAT, "tinytitan_weights": digest, "tinytitan_layout": layout,
            "tinytitan_tokens": base64.b64encode(tokens.astype(np.int32).tobytes()).decode(),
            "tinytitan_spans": json.dumps([[s.tokens, s.text, s.generated] for s in spans]),
            "tinytitan_trimmable": "1" if trimmable else "0", "tinytitan_kv_bytes": str(kv_bytes)}
    if prompt is not None:
        meta["tinytitan_prompt_tokens"] = str(prompt)
        if lasting_prompt is not None and lasting_prompt < prompt:
            meta["tinytitan_lasting_prompt"] = str(lasting_prompt)
    return meta


def spans_of(meta: dict) -> tuple[Span, ...]:
    return tuple(Span(int(n), t, bool(g)) for n, t, g in json.loads(meta.get("tinytitan_spans", "[]")))


def entry_of(path: Path, meta: dict, size: int, used: float = 0.0) -> OnDisk:
    """A file's entry, from its header (``read_metadata``), its size and its mtime."""
    tokens = np.frombuffer(base64.b64decode(meta.get("tinytitan_tokens", "")), dtype=np.int32).astype(np.int64)
    prompt, lasting = meta.get("tinytitan_prompt_tokens", ""), meta.get("tinytitan_lasting_prompt", "")
    held = meta.get("tinytitan_kv_bytes", "")
    return OnDisk(path, tokens, size, meta.get("tinytitan_layout", ""), meta.get("tinytitan_trimmable", "1") != "0",
                  int(prompt) if prompt.isdigit() else None, int(lasting) if lasting.isdigit() else None,
                  spans_of(meta), used, int(held) if held.isdigit() else None)


SPLICE_FILES = 16  # the most recently used files whose answers a prompt is spliced with (prompt/splice.py)


def recent_answers(files, limit: int = SPLICE_FILES) -> list[tuple[np.ndarray, tuple[Span, ...]]]:
    """The ids and spans of the ``limit`` most recently used files holding an answer (a splice candidate each:
    prompt/splice.py)."""
    return [(f.tokens, f.spans) for f in heapq.nlargest(limit, (f for f in files if f.spliceable), key=lambda f: f.used)]


def save_whole(snap: list, meta: dict, tmp: Path, path: Path) -> None:
    """A KV snapshot written to ``tmp``, synced, then renamed to ``path``: a reader sees the whole file or none.
    A write that fails (a full disk, an I/O error) leaves no torn temporary file holding the space."""
    from mlx_lm.models.cache import save_prompt_cache

    try:
        # the owner's only from its first byte (the metadata holds the conversation's text): mlx truncates the file
        # it is given and keeps its mode, where a chmod after would leave the written file open to others till then
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.chmod(tmp, 0o600)  # (a file already there keeps its mode through O_CREAT)
        save_prompt_cache(str(tmp), snap, meta)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
