"""Test backends built on the scripted one."""

from __future__ import annotations

from tinytitan.engine.backends.scripted import ScriptedBackend


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


class Asked(Recording):
    """Keeps every ChatRequest it was asked to run, beside its prompt."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = []

    def prepare(self, req):
        self.requests.append(req)
        return super().prepare(req)


def script_forcer(script: list[int], end: int):
    """A logits processor that forces ``script``, then ``end``: the next token by position, a function of how far
    ``tokens`` reaches past the first call's (a verify step asks a processor about positions whose draft may be
    rejected, so it may not count its calls)."""
    import mlx.core as mx

    first: list[int] = []

    def force(tokens, logits):
        first[:] = first or [tokens.size]
        at = tokens.size - first[0]
        nxt = script[at] if at < len(script) else end
        return mx.where(mx.arange(logits.shape[-1]) == nxt, logits, -mx.inf)

    return force
