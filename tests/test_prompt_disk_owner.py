"""The prompt prefixes on disk hold the conversation's text (``tinytitan_spans``) and tokens: another local
user must not read them (as stored responses and memory, they are the owner's only)."""

from __future__ import annotations

import stat
import time

from prompt_cache_helpers import disk_cache, demo_request
from tinytitan.engine.cache.disk_files import read_metadata


async def test_prompt_prefixes_on_disk_are_the_owners_only(demo_backend, tmp_path):
    from tinytitan.engine.engine import Engine

    directory = tmp_path / "cache" / "tinytitan" / "prompt-cache"
    saved = demo_backend.prompt_cache
    try:
        demo_backend.prompt_cache = disk_cache(demo_backend, directory)
        req = demo_request([("system", "You are terse. " * 20), ("user", "my secret plan " * 10)])
        async with Engine(demo_backend).session(req) as events:
            [ev async for ev in events]
        assert demo_backend.prompt_cache.disk.flush()
    finally:
        demo_backend.prompt_cache = saved
    files = list(directory.glob("*.safetensors"))
    assert files and "my secret plan" in read_metadata(files[0])["tinytitan_spans"]
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f"{f.name}: {oct(f.stat().st_mode)}"
    assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0, oct(directory.stat().st_mode)

    # a file an earlier version wrote open to others is made the owner's only when the directory is read
    for f in files:
        f.chmod(0o644)
    disk = disk_cache(demo_backend, directory).disk
    disk.start()  # (its writer thread reads the directory first)
    deadline = time.monotonic() + 30
    while not disk.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f"{f.name}: {oct(f.stat().st_mode)}"


def test_a_prefix_file_is_the_owners_only_while_it_is_written(tmp_path, monkeypatch):
    """Not written open to others and closed after: another user could open it while it is written, and keep it."""
    import os

    import mlx.core as mx
    from mlx_lm.models import cache as mlx_cache

    from tinytitan.engine.cache import disk_files

    modes = []
    real = mlx_cache.save_prompt_cache

    def save(path, *args, **kwargs):
        real(path, *args, **kwargs)
        modes.append(stat.S_IMODE(os.stat(path).st_mode))

    monkeypatch.setattr(mlx_cache, "save_prompt_cache", save)
    kv = mlx_cache.KVCache()
    kv.update_and_fetch(mx.zeros((1, 1, 4, 8)), mx.zeros((1, 1, 4, 8)))
    old = os.umask(0o022)
    try:
        disk_files.save_whole([kv], {"tinytitan_spans": "my secret plan"}, tmp_path / ".x.tmp.safetensors",
                              tmp_path / "x.safetensors")
    finally:
        os.umask(old)
    assert modes and modes[0] & 0o077 == 0, oct(modes[0])


def test_the_default_folder_an_earlier_version_made_open_is_made_the_owners_only(demo_backend, tmp_path,
                                                                                monkeypatch):
    directory = tmp_path / "prompt-cache"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    monkeypatch.setenv("TINYTITAN_PROMPT_CACHE_DIR", str(directory))  # (what the default folder is)
    disk = disk_cache(demo_backend, directory).disk
    disk.start()
    deadline = time.monotonic() + 30
    while not disk.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700, oct(directory.stat().st_mode)

    named = tmp_path / "named"  # a folder the operator names is left as it is
    named.mkdir(mode=0o755)
    named.chmod(0o755)
    disk = disk_cache(demo_backend, named).disk
    disk.start()
    deadline = time.monotonic() + 30
    while not disk.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stat.S_IMODE(named.stat().st_mode) == 0o755
