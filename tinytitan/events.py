"""The internal token-event stream: what a backend yields, what a protocol machine consumes.

Rules:
- Events are immutable values. A generation is the sequence
  ``Started PromptLogprobs? (ReasoningDelta | TextDelta | ToolCallStarted ToolCallArgsDelta* ToolCallDone)*
  (Finished | Failed)`` (``PromptLogprobs`` only where the request asks); ``Failed`` may also come first (nothing
  was generated).
- The channel of each generated token (reasoning, text, tool call) is decided once, by the backend's output
  parser, from the model's own markers; ``Usage.reasoning_tokens`` counts tokens by that channel.
- ``Finished.reason`` is one of ``stop`` (the model ended its turn), ``length`` (the output cap),
  ``stop_sequence`` (a client stop string matched; ``stop_sequence`` holds it) or ``tool_calls`` (the turn
  ended after at least one tool call). Protocols map these onto their own vocabularies in their spec tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        """Two generations' counts as one (a request that ran several, e.g. memory rounds or summary passes)."""
        return Usage(self.prompt_tokens + other.prompt_tokens, self.cached_tokens + other.cached_tokens,
                     self.completion_tokens + other.completion_tokens, self.reasoning_tokens + other.reasoning_tokens)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def uncached_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True)
class Started:
    prompt_tokens: int
    cached_tokens: int = 0
    sampling: dict = field(default_factory=dict, compare=False)  # the values used: temperature, top_p, top_k …
    # a prompt sent as token ids (``ChatRequest.prompt_ids``): the ids decoded, as the engine reads them (legacy
    # Completions' echo of them); None for any other prompt (its text is the request's own)
    prompt_text: str | None = None


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability (decode/logprobs.py says from which distribution), with the
    likeliest tokens at its position (``top``: as many as the request asked, likeliest first; their own
    ``top`` empty). ``token`` is the token's text as the tokenizer decodes it alone (a piece of a character
    decodes to U+FFFD), ``bytes`` its own bytes."""

    token: str
    bytes: tuple[int, ...]
    logprob: float
    top: tuple["TokenLogprob", ...] = ()


@dataclass(frozen=True)
class PromptLogprobs:
    """The prompt's own tokens as the model read them, where the request asks (``ChatRequest.prompt_logprobs``):
    ``text``, its ids decoded; ``tokens``, each prompt token (``TokenLogprob``) with its log probability given the
    tokens before it and the likeliest tokens at its position — the first's ``logprob`` None and its ``top``
    empty: nothing comes before it. Sent once, after ``Started`` and before any delta."""

    text: str
    tokens: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class TextDelta:
    text: str
    # where the request asked for log probabilities: the answer's tokens whose text this delta completes, in order
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ToolCallStarted:
    index: int
    call_id: str
    name: str
    namespace: str | None = None


@dataclass(frozen=True)
class ToolCallArgsDelta:
    index: int
    text: str


@dataclass(frozen=True)
class ToolCallDone:
    index: int
    arguments: str = ""  # the complete argument JSON, for ``.done``-style wire events
    complete: bool = True  # False: its arguments were cut short (the output cap, or markup that ended early)


@dataclass(frozen=True)
class KeepAlive:
    """Nothing new for a while (waiting for the model, or a long prefill): only sent to protocols whose
    spec asks for it (``extra.keepalive_seconds``), so a slow first token does not look like a dead link."""

    waited: float = 0.0


@dataclass(frozen=True)
class Timing:
    """Where a turn's time went, as only the engine can see it (seconds; None where a step did not apply).
    ``prefill_s`` runs from the start of decoding to the first generated token (the uncached prompt read
    and the first sample), ``decode_s`` from there to the end."""

    admission_wait_s: float | None = None  # waiting in the queue for the decode slot
    load_s: float | None = None  # making the model resident (a catalog switch, a lazy first load)
    render_s: float | None = None  # the chat template
    tokenize_s: float | None = None
    prefill_s: float | None = None
    prefill_tokens: int = 0  # the prompt tokens actually read (not served from the prompt cache)
    decode_s: float | None = None
    decode_tokens: int = 0
    grammar_mask_s: float | None = None  # time spent masking logits for an output grammar, where one applies
    draft_tokens: int = 0  # speculative decoding: tokens drafted (prompt lookup, a draft model) and verified
    draft_accepted_tokens: int = 0  # ... and of those, accepted (each also counted once as generated)


@dataclass(frozen=True)
class Finished:
    reason: str
    usage: Usage = field(default_factory=Usage)
    stop_sequence: str | None = None
    timing: Timing | None = None


SHUTTING_DOWN = "server_shutting_down"  # a Failed's code when the server stopped it (``Engine.wind_down``)


@dataclass(frozen=True)
class Failed:
    message: str
    type: str = "server_error"  # an error kind (``errors.kinds`` of the protocol's spec says how it looks)
    code: str | None = None  # the error's own code, where it has one (``group_broken``): in band and folded alike

    @classmethod
    def in_generation(cls, exc: BaseException) -> "Failed":
        """A generation that broke with ``exc`` after it started (the engine's, in band): a server error saying
        "generation failed: …", whatever ``exc`` is, save one whose model cannot generate now (``ApiError`` of kind
        ``unavailable``: a broken group of processes), which says so as a new request is told (its code too: a
        folded answer is refused as a new request is, 503 ``group_broken``). What a protocol's open stream ends on
        when its events raise, a refusal of the request among them, is ``protocols/failure.refusal_or_failure``."""
        message = f"generation failed: {getattr(exc, 'message', exc)}"
        if getattr(exc, "kind", None) == "unavailable":
            return cls(message, "unavailable", getattr(exc, "code", None))
        return cls(message)


TokenEvent = Union[
    Started, PromptLogprobs, ReasoningDelta, TextDelta, ToolCallStarted, ToolCallArgsDelta, ToolCallDone, KeepAlive,
    Finished, Failed
]

EVENT_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (Started, PromptLogprobs, ReasoningDelta, TextDelta, ToolCallStarted, ToolCallArgsDelta, ToolCallDone,
                KeepAlive, Finished, Failed)
}

