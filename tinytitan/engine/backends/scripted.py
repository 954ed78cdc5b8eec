"""The scripted backend: a model replaced by a script of raw model outputs.

The script is a YAML list; request k is answered by entry k (the last entry repeats). An entry is a
string (the raw output, markers and all), or a mapping ``{output: str, delay_ms: int, error: str}``:
``delay_ms`` sleeps before each token (for cancellation and keep-alive tests); ``error`` fails the
generation after the stream opened. The text is tokenized with the demo tokenizer and decoded by the engine's
own decode step (scheduler.py: a row, its fold, its ending), with a scripted forward in place of the model
(``ScriptedForward``: the script is what is "sampled"), so channel and tool-call parsing, stop strings, caps
and token counts are the real ones. Its distribution is the script's: each token certain (log probability 0, no
other token possible), which is what a request asking for log probabilities is told.

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

from .base import Backend
from ..prompt.prepare import Prepared
from ..decode.token_events import DecodeLoop
from ..decode.logprobs import prompt_top
from ..decode.plan import Next, Plan, Prefill, Sample, StepResult, Take
from ..cache.memory import PromptCache


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

    from ...demo_model import ensure_demo_model

    return load_tokenizer(ensure_demo_model())


# as large as the models the recorded clients were talking to: Claude Code's interactive prompts alone are
# 35–44k tokens
SCRIPTED_CONTEXT_WINDOW = 131072


class ScriptedBackend(Backend):
    def __init__(self, entries: list[ScriptEntry], tokenizer, model_id: str = "tinytitan-scripted",
                 context_window: int = SCRIPTED_CONTEXT_WINDOW, prompt_cache: PromptCache | None = None):
        """``prompt_cache``: keep the token bookkeeping of a prefix cache, so usage reports the tokens a
        real cache would reuse (the server does this; unit tests leave it off for fixed usage)."""
        super().__init__()
        self.prompt_cache = prompt_cache
        self.entries = entries
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.context_window = context_window
        self._counter = itertools.count()
        self._started = 0
        self._lock = threading.Lock()
        self.tokens_decoded = 0  # across all requests: lets tests see that a cancelled request stopped

    @property
    def started(self) -> int:
        """How many generations have taken their entry (tests wait on it to order their requests)."""
        return self._started

    def next_entry(self) -> ScriptEntry:
        with self._lock:
            k = next(self._counter)
            self._started = k + 1
        return self.entries[min(k, len(self.entries) - 1)]

    # -- decoding: the engine's own decode step, with the script for a model (ScriptedForward) ---------------
    def start(self, prepared: Prepared, model, reuse: bool = True, handed=None) -> tuple["ScriptRun", int, int]:
        """A generation's script (the next entry, tokenized) as the "cache" its forward steps through, and the
        prompt tokens a real prefix cache would reuse (the entry it keeps is the prompt and the scripted
        answer, without KV; so nothing is ever ``handed`` on)."""
        entry = self.next_entry()
        ids = self.tokenizer.encode(entry.output, add_special_tokens=False)
        cached = 0
        if self.prompt_cache:
            cached = self.prompt_cache.fetch(prepared.tokens)[1] if reuse else 0
            self.prompt_cache.store(list(prepared.tokens) + ids[: prepared.max_tokens], None,
                                    facts=prepared.facts())
        return ScriptRun(self, entry, ids, prepared), cached, cached

    def sampler_for(self, prepared: Prepared, loop: DecodeLoop) -> tuple[Callable | None, list]:
        return None, []  # the script is what is "sampled": no sampler, and no mask (the script is checked)

    def decode(self, prepared: Prepared, loop: DecodeLoop, should_stop: Callable[[], bool]) -> None:
        """One request, to its end: a row of the engine's decode step (scheduler.py), its tokens from the script."""
        from ..decode.scheduler import decode_one

        decode_one(self, prepared, loop, should_stop, make_forward=ScriptedForward)


class ScriptRun:
    """Where one generation's script stands: the tokens it hands out next, checked against its grammar. The
    scripted forward's "KV cache" for the row."""

    def __init__(self, backend: ScriptedBackend, entry: ScriptEntry, ids: list[int], prepared: Prepared):
        self.backend, self.entry, self.ids, self.prepared = backend, entry, ids, prepared
        self.at = 0  # the next script token
        self.read = 0  # prompt tokens "read"
        self.pending: int | BaseException | None = None  # the token sampled last (or the failure it met)
        self.matcher = prepared.grammar.matcher() if prepared.grammar is not None else None
        self.eos = min(backend.tokenizer.eos_token_ids)

    def sample(self) -> int | BaseException:
        """The next token: the script's, or end-of-sequence where the script (or its grammar) ends; a failure
        where the script asks for one, or its grammar refuses it, is handed out in its place."""
        matcher, tokenizer = self.matcher, self.backend.tokenizer
        if self.at == len(self.ids):
            if self.entry.error:
                return BackendFailure(self.entry.error)
            if matcher is not None and not matcher.is_accepting():
                return ScriptDoesNotFit("the scripted output ends before the request's grammar is complete")
            return self.eos
        token = self.ids[self.at]
        if matcher is not None:
            fits = _fits(matcher, token)
            if fits is None:
                return self.eos  # only end-of-sequence is left: the answer ends here, as a masked model's would
            if fits is False:
                seen = tokenizer.decode(self.ids[:self.at + 1])
                return ScriptDoesNotFit(f"the scripted output does not fit the request's grammar "
                                        f"({self.prepared.grammar.name or 'grammar'}) after {seen[-80:]!r}")
        self.at += 1
        return token


class ScriptedForward:
    """The decode step's forward with a script for a model (step.Forward's interface): every row steps on its
    own "cache" (its ``ScriptRun``), pipelined as a lone MLX row is — the token sampled by one step is read
    by the next — so the rows, the fold and the ending of a generation are the engine's own."""

    ragged = False  # a batch row gets one-token steps (it has no batch: every row steps on its own run)
    first_read_at_once = True  # as mlx on a CPU: a first sample is read at once (scheduler.py)

    def __init__(self, backend: ScriptedBackend, max_batch: int):
        self.backend, self.model = backend, None
        self.runs: dict[int, ScriptRun] = {}

    def own(self, row_id: int, run: ScriptRun) -> None:
        self.runs[row_id] = run

    def release(self, row_id: int) -> None:
        self.runs.pop(row_id, None)
        return None  # nothing to keep: the prompt cache's entry was noted at the start

    def run(self, plan: Plan, rows: dict) -> StepResult:
        out = StepResult()
        for row_id in plan.cancel:
            self.release(row_id)
        for s in (*plan.alone, *plan.batch):
            run = self.runs[s.row]
            before = run.read
            if isinstance(s, Prefill):
                run.read += len(s.tokens)
            elif isinstance(s, Sample):
                run.read = len(rows[s.row].tokens)
                run.pending = run.sample()
                if s.now:
                    self._hand_out(run, s.row, out)
            elif isinstance(s, (Next, Take)):
                self._hand_out(run, s.row, out)
                if isinstance(s, Next):
                    run.pending = run.sample()
                    if s.hold and s.row not in out.failed:
                        first = out.tokens.pop(s.row)
                        self._hand_out(run, s.row, out)
                        out.tokens[s.row] = first + out.tokens.get(s.row, ())
            out.read[s.row] = run.read
            out.pending[s.row] = run.pending is not None
            top = prompt_top(run.prepared)
            if top is not None and run.read > before:  # the prompt tokens after the positions read: as certain
                after = rows[s.row].tokens[before + 1:run.read + 1]  # as the script's own (below)
                out.prompt_logprobs[s.row] = tuple((0.0, ((t, 0.0),) if top else ()) for t in after)
            top = run.prepared.logprobs  # (its own run's request: the forward reads no row here)
            if top is not None and s.row in out.tokens:  # the script is certain of each token: log probability 0,
                # every other token impossible (so the only alternative listed is the token itself)
                out.logprobs[s.row] = tuple((0.0, ((t, 0.0),) if top else ()) for t in out.tokens[s.row])
        return out

    def _hand_out(self, run: ScriptRun, row_id: int, out: StepResult) -> None:
        token, run.pending = run.pending, None
        if isinstance(token, BaseException):
            out.failed[row_id] = token
            return
        if run.entry.delay_ms:
            time.sleep(run.entry.delay_ms / 1000)
        if token != run.eos:
            self.backend.tokens_decoded += 1
        out.tokens[row_id] = (token,)

    def close(self) -> None:
        self.runs.clear()
