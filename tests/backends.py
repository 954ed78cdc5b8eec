"""Test backends built on the scripted one."""

from __future__ import annotations

from tinytitan.engine.scripted import ScriptedBackend


class FailsToLoad(ScriptedBackend):
    """A model that is not resident and cannot be loaded (weights missing or corrupt, memory short): the
    failure shows only once a request needs the weights."""

    @property
    def loaded(self) -> bool:
        return False

    def ensure_loaded(self):
        raise RuntimeError("weights missing")
