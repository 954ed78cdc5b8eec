"""A model's weights are hashed once, off the event loop (models/weights_digest.py): the model listings
(``/v1/models``, ``/api/tags``, ``/api/ps``, ``/api/show``) and the prompt cache on disk share one digest, and a
request is served while the first hash runs. The hash is made to block on an event the test controls: no timing
is asserted."""

from __future__ import annotations

import json
import threading

import httpx
import mlx.core as mx
import trio

from tinytitan.engine.cache.disk import PromptDisk
from tinytitan.engine.backends.scripted import ScriptEntry, ScriptedBackend
from tinytitan.models import weights_digest

MODEL = "tinytitan-scripted"


def model_dir(root):
    """An MLX model directory's files, as far as a listing reads them: a config and two weight files."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    mx.save_safetensors(str(root / "model-00001-of-00002.safetensors"), {"a": mx.ones((4, 8), dtype=mx.float32)})
    mx.save_safetensors(str(root / "model-00002-of-00002.safetensors"), {"b": mx.ones((8,), dtype=mx.float16)})
    return root, sorted(root.glob("*.safetensors"))


class Hashing:
    """``weights_digest.file_sha256`` counted, and held until ``release`` is set."""

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()
        real = weights_digest.file_sha256

        def held(path):
            self.calls.append(path.name)
            self.started.set()
            self.release.wait(20)  # (a bound, not a timing: on the event loop this would stall every request)
            return real(path)

        monkeypatch.setattr(weights_digest, "file_sha256", held)


def test_concurrent_callers_share_one_computation(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    _, files = model_dir(tmp_path / "m")
    hashing = Hashing(monkeypatch)
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(weights_digest.digest(files))) for _ in range(3)]
    for t in threads:
        t.start()
    assert hashing.started.wait(10)
    assert weights_digest.remembered(files) is None and got == []  # nobody has an answer yet
    hashing.release.set()
    for t in threads:
        t.join(10)
    assert len(got) == 3 and len(set(got)) == 1 and got[0].startswith("sha256:")
    assert sorted(hashing.calls) == [f.name for f in files]  # each file read once, for all three callers
    assert weights_digest.remembered(files) == got[0]
    # the prompt cache on disk names the model by the same digest, without reading anything again
    assert PromptDisk(tmp_path / "pc", files, lambda: "layout", 1 << 20).digest == got[0]
    assert len(hashing.calls) == len(files)


class WithWeights(ScriptedBackend):
    """The scripted backend, listed with a weights directory (as an MLX model is)."""

    def __init__(self, *args, path, **kwargs):
        super().__init__(*args, **kwargs)
        self.path = path

    def describe(self) -> dict:
        return {**super().describe(), "path": str(self.path)}


async def test_the_first_listing_hashes_off_the_loop_once(serve, demo_tok, tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    root, files = model_dir(tmp_path / "m")
    hashing = Hashing(monkeypatch)
    s = await serve(backend=WithWeights([ScriptEntry("Hi.")], demo_tok, path=root))
    listed: dict[str, httpx.Response] = {}
    async with httpx.AsyncClient(timeout=30) as client, trio.open_nursery() as nursery:
        async def get(path):
            listed[path] = await client.get(s.url(path))

        for path in ("/api/tags", "/v1/models", "/api/ps"):
            nursery.start_soon(get, path)
        with trio.fail_after(10):
            while not hashing.started.is_set():
                await trio.sleep(0.01)
        # the weights are being read (held): the loop answers a generation and the health check meanwhile
        r = await client.post(s.url("/v1/chat/completions"),
                              json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hi."
        assert (await client.get(s.url("/health"))).status_code == 200
        assert listed == {}  # the listings still wait for the one hash
        hashing.release.set()
    assert sorted(hashing.calls) == [f.name for f in files]  # once, for three listings asked together
    digest = listed["/v1/models"].json()["data"][0]["digest"]
    assert digest == weights_digest.remembered(files) and digest.startswith("sha256:")
    assert listed["/api/tags"].json()["models"][0]["digest"] == digest.removeprefix("sha256:")
    # later listings read no weight again
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.get(s.url("/api/tags"))).json()["models"][0]["digest"] == digest.removeprefix("sha256:")
    assert len(hashing.calls) == len(files)


def test_a_converted_gguf_is_named_by_its_source_without_reading_the_copy(tmp_path, monkeypatch):
    """A conversion's weights follow from its GGUF and its directory's name: the float32 copy is not read."""
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    root, files = model_dir(tmp_path / "m-0123456789abcdef-v4-float32")
    (root / "gguf_source.json").write_text(json.dumps({"digest": "sha256:" + "ab" * 32}))
    hashing = Hashing(monkeypatch)
    hashing.release.set()
    digest = weights_digest.remembered(files)
    assert digest is not None and weights_digest.digest(files) == digest and hashing.calls == []
    # another form of the same GGUF is other weights
    other, other_files = model_dir(tmp_path / "m-0123456789abcdef-v4-quantized")
    (other / "gguf_source.json").write_text(json.dumps({"digest": "sha256:" + "ab" * 32}))
    assert weights_digest.digest(other_files) not in (None, digest)


def _replaced_keeping_size_and_mtime(path, data, in_place):
    """``path``'s bytes replaced by ``data`` (as long), its mtime set back as ``cp -p`` (``in_place``: the same inode,
    written over) or ``rsync -a`` (a new file renamed over it) leave it."""
    import os
    import time

    before = os.stat(path)
    assert len(data) == before.st_size
    while True:
        if in_place:
            with open(path, "r+b") as f:
                f.write(data)
            target = path
        else:
            target = path.with_name(f".{path.name}.tmp")
            target.write_bytes(data)
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        if os.stat(target).st_ctime_ns != before.st_ctime_ns:  # (a real copy takes longer than the kernel's clock tick)
            break
        time.sleep(0.005)
    if not in_place:
        os.replace(target, path)
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert (after.st_ino == before.st_ino) == in_place


def test_weights_replaced_keeping_size_and_mtime_are_hashed_again(tmp_path, monkeypatch):
    """A weights file replaced by ``cp -p`` or ``rsync -a`` keeps its size and mtime: its remembered digest is not the
    new weights' (else the prompt cache on disk reads the old weights' prefixes back for them: wrong answers)."""
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    _, files = model_dir(tmp_path / "m")
    first = weights_digest.digest(files)
    for in_place in (True, False):
        new = bytearray(files[0].read_bytes())
        new[-1] ^= 0xFF  # (the last tensor's last byte: the same size, other weights)
        _replaced_keeping_size_and_mtime(files[0], bytes(new), in_place)
        assert weights_digest.remembered_file_digest(files[0]) is None  # nothing remembered for these bytes
        now = weights_digest.digest(files)  # (this process, and the next one: the digest remembered on disk)
        assert now not in (None, first) and weights_digest.remembered(files) == now
        disk = PromptDisk(tmp_path / "pc", files, lambda: "layout", 1 << 20)
        assert disk.digest == now  # the prompt cache on disk names the new weights by the new digest
        first = now
