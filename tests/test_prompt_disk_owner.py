"""The prompt prefixes on disk hold the conversation's text (``tinytitan_spans``) and tokens: another local
user must not read them (as stored responses and memory, they are the owner's only)."""

from __future__ import annotations

import stat

from test_prompt_disk import _cache, _req
from tinytitan.engine.cache.disk_files import read_metadata


async def test_prompt_prefixes_on_disk_are_the_owners_only(demo_backend, tmp_path):
    from tinytitan.engine.engine import Engine

    directory = tmp_path / "cache" / "tinytitan" / "prompt-cache"
    saved = demo_backend.prompt_cache
    try:
        demo_backend.prompt_cache = _cache(demo_backend, directory)
        req = _req([("system", "You are terse. " * 20), ("user", "my secret plan " * 10)])
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
