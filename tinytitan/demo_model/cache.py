"""The per-user cache of built demo models: one directory per variant and recipe hash, installed atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .build import build_demo_model
from .recipe import _variant, recipe_version


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tinytitan"


def default_demo_model_dir(variant: str = "demo") -> Path:
    """``$XDG_CACHE_HOME|~/.cache`` / ``tinytitan/demo-model[-<variant>]-<recipe hash>``."""
    _variant(variant)
    name = "demo-model" if variant == "demo" else f"demo-model-{variant}"
    return _cache_root() / f"{name}-{recipe_version(variant)}"


_COMPLETE_MARKER = "model.safetensors"  # written last by build_demo_model


def ensure_demo_model(variant: str = "demo", path=None) -> Path:
    """Return the demo model directory, building it once (atomically) if it is not there yet."""
    target = Path(path) if path is not None else default_demo_model_dir(variant)
    return install(target, lambda tmp: build_demo_model(tmp, variant))


def install(target: Path, build) -> Path:
    """``target``, built by ``build(directory)`` once if it is not there yet (its ``model.safetensors`` written last).

    The build goes to a temporary directory next to the target and is renamed into place, so a reader never
    sees a partial directory; if two processes race, one rename wins and the other's copy is discarded.
    """
    if _is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        build(tmp)
        for _ in range(3):
            try:
                os.replace(tmp, target)  # atomic; succeeds if target is absent or an empty directory
                break
            except OSError:
                if _is_complete(target):
                    break  # another process won the race: use its (identical) build
                # A leftover that is not a finished build: move it aside and retry.
                stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".stale", dir=target.parent))
                try:
                    os.replace(target, stale / "old")
                except OSError:
                    pass
                shutil.rmtree(stale, ignore_errors=True)
        else:
            raise RuntimeError(f"could not install the demo model at {target}")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _is_complete(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / _COMPLETE_MARKER).is_file()
