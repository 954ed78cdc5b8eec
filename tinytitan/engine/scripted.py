"""The scripted backend: a model replaced by a script of raw model outputs.

The script is a YAML list; request k is answered by entry k (the last entry repeats). An entry is a
string (the raw output, markers and all), or a mapping ``{output: str, delay_ms: int, error: str}``:
``delay_ms`` sleeps before each token (for cancellation and keep-alive tests); ``error`` fails the
generation after the stream opened. The text is tokenized with the demo tokenizer and goes through the
same channel and tool-call parsing as real output, so token counts are real.

A script is not masked, so it is checked: where the request has a grammar (structured output, a forced call,
strict tools, a limit on calls), each scripted token must be one the mask would allow. Where the grammar
leaves only end-of-sequence (a document complete, the last call allowed made), the answer ends there, as a
masked model's would; any other token the grammar refuses, or a script that ends before the grammar is
complete, fails the request (``ScriptDoesNotFit``) — never plain text under ``tool_choice: "required"``.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from .backend import Backend, Prepared
from .decode_loop import DecodeLoop
from .prompt_cache import PromptCache
from .raw import IncrementalText


class BackendFailure(RuntimeError):
    """A generation failed after it started (reported to the client as a stream error)."""


class ScriptDoesNotFit(BackendFailure):
    """The scripted output is not one the request's grammar admits."""


def _fits(matcher, token: int) -> bool | None:
    """True: the grammar takes ``token`` (consumed); None: it leaves only end-of-sequence (a masked model
    stops here); False: it refuses ``token`` where it still wants more."""
    if matcher.try_consume_tokens([token]) == 1:
        return True
    return None if matcher.is_stopped() else False


@dataclass(frozen=True)
class ScriptEntry:
    output: str
    delay_ms: int = 0
    error: str | None = None


def load_script(path: str | Path) -> list[ScriptEntry]:
    raw = yaml.safe_load(Path(path).read_text())
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: a script is a non-empty YAML list of model outputs")
    entries = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            entries.append(ScriptEntry(item))
        elif isinstance(item, dict) and set(item) <= {"output", "delay_ms", "error"}:
            entries.append(ScriptEntry(str(item.get("output", "")), int(item.get("delay_ms", 0)), item.get("error")))
        else:
            raise ValueError(f"{path}: entry {i}: a string or a mapping of output / delay_ms / error")
    return entries


def demo_tokenizer():
    """The demo model's tokenizer (and chat template), built on first use like the model itself."""
    from mlx_lm.utils import load_tokenizer

    from ..demo_model import ensure_demo_model

    return load_tokenizer(ensure_demo_model())


# as large as the models the recorded clients were talking to: Claude Code's interactive prompts alone are
# 35–44k tokens
SCRIPTED_CONTEXT_WINDOW = 131072


class ScriptedBackend(Backend):
    def __init__(self, entries: list[ScriptEntry], tokenizer, model_id: str = "tinytitan-scripted",
                 context_window: int = SCRIPTED_CONTEXT_WINDOW, prompt_cache: PromptCache | None = None):
        """``prompt_cache``: keep the token bookkeeping of a prefix cache, so usage reports the tokens a
        real cache would reuse (the server does this; unit tests leave it off for fixed usage)."""
        self.prompt_cache = prompt_cache
        self.entries = entries
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.context_window = context_window
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self.tokens_decoded = 0  # across all requests: lets tests see that a cancelled request stopped

    def next_entry(self) -> ScriptEntry:
        with self._lock:
            k = next(self._counter)
        return self.entries[min(k, len(self.entries) - 1)]

    def decode(self, prepared: Prepared, loop: DecodeLoop, should_stop: Callable[[], bool]) -> None:
        entry = self.next_entry()
        ids = self.tokenizer.encode(entry.output, add_special_tokens=False)
        cached = self.prompt_cache.fetch(prepared.tokens)[1] if self.prompt_cache else 0
        loop.start(len(prepared.tokens), cached)
        if self.prompt_cache:
            self.prompt_cache.store(list(prepared.tokens) + ids[: prepared.max_tokens], None)
        detok = self.tokenizer.detokenizer
        detok.reset()
        raw = IncrementalText(self.tokenizer, prepared.tokens) if prepared.req.prompt is not None else None
        hit_length = False
        matcher = prepared.grammar.matcher() if prepared.grammar is not None else None
        for n, tok in enumerate(ids):
            if should_stop():
                return
            if n == prepared.max_tokens:
                hit_length = True
                break
            if matcher is not None:
                fits = _fits(matcher, tok)
                if fits is None:
                    break  # only end-of-sequence is left: the answer ends here, as a masked model's would
                if fits is False:
                    seen = self.tokenizer.decode(ids[:n + 1])
                    raise ScriptDoesNotFit(f"the scripted output does not fit the request's grammar "
                                           f"({prepared.grammar.name or 'grammar'}) after {seen[-80:]!r}")
            if entry.delay_ms:
                time.sleep(entry.delay_ms / 1000)
                if should_stop():
                    return
            detok.add_token(tok)
            self.tokens_decoded += 1
            if not loop.token(raw.add(tok) if raw else detok.last_segment):
                break
        detok.finalize()
        rest = raw.flush() if raw else detok.last_segment
        if rest and loop.stop.matched is None:
            loop.parser_text(rest)
        if entry.error:
            raise BackendFailure(entry.error)
        if matcher is not None and not hit_length and not matcher.is_accepting():
            raise ScriptDoesNotFit("the scripted output ends before the request's grammar is complete")
        loop.end(hit_length)
