"""A prefix file the server may read but not chmod (another user's, in a shared folder; a vfat/SMB mount whose
files all show 0644/0755 and refuse chmod; a read-only volume): it is still a prefix this model can use."""
import os
import time

from prompt_cache_helpers import disk_cache, demo_request


async def test_a_readable_prefix_whose_mode_cannot_be_changed_is_still_read(demo_backend, tmp_path, monkeypatch):
    from tinytitan.engine.engine import Engine

    directory = tmp_path / "shared"
    saved = demo_backend.prompt_cache
    try:
        demo_backend.prompt_cache = disk_cache(demo_backend, directory)
        async with Engine(demo_backend).session(demo_request([("user", "a long shared question " * 20)])) as events:
            [ev async for ev in events]
        assert demo_backend.prompt_cache.disk.flush()
    finally:
        demo_backend.prompt_cache = saved
    files = list(directory.glob("*.safetensors"))
    for f in files:
        f.chmod(0o644)  # as an earlier version (or the other user's umask, or the mount) shows it

    def refused(path, mode, *a, **kw):
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "chmod", refused)
    disk = disk_cache(demo_backend, directory).disk
    disk.start()
    deadline = time.monotonic() + 30
    while not disk.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert disk.stats()["entries"] == len(files), disk.stats()
