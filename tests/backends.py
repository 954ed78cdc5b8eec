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


class Recording(ScriptedBackend):
    """Keeps every prompt it was asked to run, as the model would read it (after the chat template)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []

    def prepare(self, req):
        prepared = super().prepare(req)
        self.prompts.append(prepared.prompt_text)
        return prepared
