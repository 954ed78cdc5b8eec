"""OpenAI Completions (legacy ``/v1/completions``): the Python its table (spec/openai_completions.yaml)
cannot say — the prompt's shapes, echo, and the fold of chunks into one ``text_completion``."""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import invalid
from ..speclang.machine import WireEvent
from .base import Protocol
from .choices import copies
from .common import parse_logit_bias
from .openai_chat import Chunks, parse_stop


def prompt_text(body: dict) -> str:
    """The prompt's text: a string, or a list of one string (``parse_prompt`` refuses other shapes; a prompt of
    token ids has no text here: echo refuses it)."""
    value = body.get("prompt", "")
    value = value[0] if isinstance(value, list) and value else value
    return value if isinstance(value, str) else ""


def token_ids(value: Any) -> bool:
    """Whether a prompt is a list of token ids (bools are not ids, though Python counts them as ints)."""
    return isinstance(value, list) and bool(value) and all(isinstance(x, int) and not isinstance(x, bool)
                                                           for x in value)


def parse_prompt(value: Any, body: dict, args: dict, v) -> None:
    ids = None
    if isinstance(value, list):
        if len(value) == 1 and token_ids(value[0]):  # a list of one list of ids: one prompt
            value = value[0]
        if token_ids(value):
            ids = tuple(value)
            if min(ids) < 0:
                raise invalid(f"Invalid token id {min(ids)} in 'prompt': token ids are not negative",
                              param="prompt", code="invalid_value")
        elif any(isinstance(x, list) for x in value) or len(value) != 1:
            raise invalid(f"'prompt' as a list of {len(value)} prompts is not supported: send one prompt per "
                          f"request", param="prompt", code="unsupported_value")
        elif not isinstance(value[0], str):
            raise invalid(f"'prompt[0]' must be a string, not {json.dumps(value[0])[:40]}", param="prompt[0]",
                          code="invalid_type")
    if body.get("echo") and body.get("logprobs") is not None:  # the prompt's own tokens' figures: a pass not made
        raise invalid("'echo' with 'logprobs' is not supported: this server gives the log probabilities of "
                      "generated tokens only", param="echo", code="unsupported_parameter")
    if body.get("echo") and body.get("suffix") is not None:
        raise invalid("'echo' cannot be combined with 'suffix' (fill-in-the-middle)", param="echo",
                      code="unsupported_value")
    if ids is not None and body.get("echo"):  # (the text the ids spell is the model's tokenizer's to say)
        raise invalid("'echo' with a prompt of token ids is not supported: send the prompt as text to have it "
                      "echoed", param="echo", code="unsupported_value")
    if ids is not None and body.get("suffix") is not None:
        raise invalid("'suffix' (fill-in-the-middle) with a prompt of token ids is not supported: send the "
                      "prompt as text", param="suffix", code="unsupported_value")
    args["prompt"] = "" if ids is not None else prompt_text(body)
    if ids is not None:
        args["prompt_ids"] = ids


@dataclass
class CompletionsState:
    """A stream's bookkeeping (``vars`` in the spec): the text chunk going out's log probabilities, where asked,
    and where its first token starts in the answer's text."""

    logprobs: dict | None = None
    offset: int = 0  # characters the tokens so far spell ...
    spelling: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))  # ... from bytes


def chunk_logprobs(m, ev) -> None:
    """A text chunk's tokens as the API's ``Logprobs`` lists them: each token (its text decoded alone), its log
    probability, its likeliest alternatives ({token: log probability}), and its offset in the completion's text
    (the characters its bytes and those before spell: a token that ends inside a character is at that
    character's index, as is the one that completes it)."""
    if m.context.get("logprobs") is None:
        m.vars.logprobs = None
        return
    tokens = getattr(ev, "logprobs", ())
    offsets = []
    for lp in tokens:
        offsets.append(m.vars.offset)
        m.vars.offset += len(m.vars.spelling.decode(bytes(lp.bytes)))
    m.vars.logprobs = {"tokens": [lp.token for lp in tokens], "token_logprobs": [lp.logprob for lp in tokens],
                       "top_logprobs": [{t.token: t.logprob for t in lp.top} for lp in tokens],
                       "text_offset": offsets}


def fold_text_completion(wire: list[WireEvent], body: dict) -> dict:
    """Chunks → one text_completion, the way an SDK accumulates a stream (the chunks' log probabilities joined)."""
    chunks = Chunks()
    text, logprobs = [], None
    for choice in chunks.choices(wire):
        text.append(choice.get("text") or "")
        if choice.get("logprobs") is not None:
            logprobs = logprobs or {key: [] for key in choice["logprobs"]}
            for key, values in choice["logprobs"].items():
                logprobs[key] += values
    if body.get("logprobs") is not None and logprobs is None:  # asked, and no token sent
        logprobs = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    return chunks.envelope("text_completion",
                           {"text": "".join(text), "index": chunks.index, "logprobs": logprobs, "finish_reason": chunks.finish})


class OpenAICompletions(Protocol):
    name = "openai_completions"
    id_prefix = "cmpl-"

    def request_hooks(self):
        return {"prompt": parse_prompt, "stop": parse_stop, "logit_bias": parse_logit_bias}

    def machine_hooks(self):
        return {"logprobs": chunk_logprobs}

    def machine_state(self) -> CompletionsState:
        return CompletionsState()

    def extra_context(self, v) -> dict:
        return {"prompt_text": prompt_text(v.body)}

    def folds(self):
        return {"text_completion": fold_text_completion}

    def choices(self, v, req):
        return copies(req, v.body.get("n") or 1)
