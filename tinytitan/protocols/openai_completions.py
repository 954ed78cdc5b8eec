"""OpenAI Completions (legacy ``/v1/completions``): the Python its table (spec/openai_completions.yaml)
cannot say — the prompt's shapes, echo (with the prompt's own tokens' log probabilities: lm-evaluation-harness's
loglikelihood requests), and the fold of chunks into one ``text_completion``."""

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


# choices in one request, prompts × n: each is a place in the queue and a row of the batch (OpenAI's bound on n)
MAX_CHOICES = 128


@dataclass
class CompletionsRequest:
    """What ``parse_prompt`` found (``Validated.state``): the prompts, each a text or a tuple of token ids."""

    prompts: list = field(default_factory=list)


def token_ids(value: Any) -> bool:
    """Whether a prompt is a list of token ids (bools are not ids, though Python counts them as ints)."""
    return isinstance(value, list) and bool(value) and all(isinstance(x, int) and not isinstance(x, bool)
                                                           for x in value)


def prompts_of(value: Any) -> list:
    """The prompts ``prompt`` holds, as OpenAI types it: a string, a list of strings, a list of token ids, or a
    list of lists of token ids."""
    if isinstance(value, str):
        return [value]
    if token_ids(value):
        return [tuple(value)]
    if not value:
        raise invalid("'prompt' is an empty list: send at least one prompt", param="prompt", code="invalid_value")
    if any(type(x) is int for x in value) and not any(isinstance(x, (str, list)) for x in value):  # ids, one not
        i, item = next((i, x) for i, x in enumerate(value) if not isinstance(x, int) or isinstance(x, bool))
        raise invalid(f"'prompt[{i}]' must be a token id (an integer), not {json.dumps(item)[:40]}",
                      param=f"prompt[{i}]", code="invalid_type")
    out: list = []
    for i, item in enumerate(value):
        if not isinstance(item, str) and not token_ids(item):
            raise invalid(f"'prompt[{i}]' must be a string or a non-empty list of token ids, not "
                          f"{json.dumps(item)[:40]}", param=f"prompt[{i}]", code="invalid_type")
        out.append(item if isinstance(item, str) else tuple(item))
    return out


def parse_prompt(value: Any, body: dict, args: dict, v) -> None:
    prompts = prompts_of(value)
    ids = [p for p in prompts if isinstance(p, tuple)]
    for p in ids:
        if min(p) < 0:
            raise invalid(f"Invalid token id {min(p)} in 'prompt': token ids are not negative",
                          param="prompt", code="invalid_value")
    choices = len(prompts) * (body.get("n") or 1)
    if choices > MAX_CHOICES:
        raise invalid(f"'prompt' has {len(prompts)} prompts and 'n' is {body.get('n') or 1}: {choices} choices, "
                      f"more than the {MAX_CHOICES} one request may ask for", param="prompt", code="invalid_value")
    if body.get("max_tokens") == 0 and not body.get("echo"):  # (vLLM alike: 0 only echoes, nothing to answer)
        raise invalid("'max_tokens' must be at least 1: 0 is accepted only with 'echo' (the prompt alone, with its "
                      "tokens' log probabilities where 'logprobs' asks)", param="max_tokens", code="invalid_value")
    if body.get("echo") and body.get("suffix") is not None:
        raise invalid("'echo' cannot be combined with 'suffix' (fill-in-the-middle)", param="echo",
                      code="unsupported_value")
    if ids and body.get("suffix") is not None:
        raise invalid("'suffix' (fill-in-the-middle) with a prompt of token ids is not supported: send the "
                      "prompt as text", param="suffix", code="unsupported_value")
    v.state.prompts = prompts
    args.update(prompt_args(prompts[0], body))


def prompt_args(prompt: str | tuple, body: dict) -> dict:
    """A prompt as the ChatRequest's fields: its text, or its token ids (with no text); with ``echo``, what its
    own tokens are read for (``prompt_figures``)."""
    text = {"prompt": prompt, "prompt_ids": None} if isinstance(prompt, str) else {"prompt": "", "prompt_ids": prompt}
    return {**text, "prompt_logprobs": prompt_figures(prompt, body)}


def prompt_figures(prompt: str | tuple, body: dict) -> int | None:
    """What the engine reads a prompt's own tokens for (``ChatRequest.prompt_logprobs``): with ``echo`` and
    ``logprobs``, their log probabilities with that many alternatives (it reads the whole prompt, no cached
    prefix); else nothing (an echo of token ids is their text, decoded by the engine: ``Started.prompt_text``)."""
    return body["logprobs"] if body.get("echo") and body.get("logprobs") is not None else None


def prompt_context(prompt: str | tuple, body: dict) -> dict:
    """What a prompt's machine reads of it: its text (none for ids: the engine decodes them,
    ``Started.prompt_text``) and whether its echo goes out at once (on ``Started``) or with its tokens' figures
    (on ``PromptLogprobs``)."""
    return {"prompt_text": prompt if isinstance(prompt, str) else "",
            "echo_at_start": bool(body.get("echo")) and prompt_figures(prompt, body) is None}


@dataclass
class CompletionsState:
    """A stream's bookkeeping (``vars`` in the spec): the text chunk going out's log probabilities, where asked,
    and where its first token starts in the answer's text."""

    logprobs: dict | None = None
    echo_text: str = ""  # the prompt echoed with its tokens' figures: its text, else its ids decoded
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
    tokens = getattr(ev, "logprobs", getattr(ev, "tokens", ()))
    offsets = []
    for lp in tokens:
        offsets.append(m.vars.offset)
        m.vars.offset += len(m.vars.spelling.decode(bytes(lp.bytes)))
    m.vars.logprobs = {"tokens": [lp.token for lp in tokens], "token_logprobs": [lp.logprob for lp in tokens],
                       "top_logprobs": [{t.token: t.logprob for t in lp.top} for lp in tokens],
                       "text_offset": offsets}


def started_echo(m, ev) -> None:
    """The prompt echoed at once (``Started``): its text as sent, or its token ids as the engine decoded them."""
    m.vars.echo_text = m.context.get("prompt_text") or ev.prompt_text or ""


def prompt_logprobs(m, ev) -> None:
    """The prompt echoed with its own tokens (``PromptLogprobs``): as OpenAI and vLLM list them, the first token's
    log probability and alternatives null (nothing comes before it); the answer's tokens' offsets go on from the
    echoed text's end."""
    m.vars.echo_text = text = m.context.get("prompt_text") or ev.text
    chunk_logprobs(m, ev)
    if m.vars.logprobs is not None and ev.tokens:
        m.vars.logprobs["top_logprobs"][0] = None
        lead = m.vars.offset - len(text)  # an opening the tokenizer added (a BOS) spells text the prompt has not:
        if lead > 0 and ev.text.endswith(text):  # its tokens stand at the echoed text's start
            m.vars.logprobs["text_offset"] = [max(o - lead, 0) for o in m.vars.logprobs["text_offset"]]
    m.vars.offset = len(text)
    m.vars.spelling.reset()


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
                           {"text": "".join(text), "index": chunks.index, "logprobs": logprobs,
                            "finish_reason": chunks.finish})


class OpenAICompletions(Protocol):
    name = "openai_completions"
    id_prefix = "cmpl-"

    def request_hooks(self):
        return {"prompt": parse_prompt, "stop": parse_stop, "logit_bias": parse_logit_bias}

    def machine_hooks(self):
        return {"logprobs": chunk_logprobs, "prompt_logprobs": prompt_logprobs, "started_echo": started_echo}

    def machine_state(self) -> CompletionsState:
        return CompletionsState()

    def extra_context(self, v) -> dict:
        prompts = v.state.prompts if v.state is not None else ()  # (none: a machine built without a request)
        return prompt_context(prompts[0] if prompts else "", v.body)

    def folds(self):
        return {"text_completion": fold_text_completion}

    def request_state(self) -> CompletionsRequest:
        return CompletionsRequest()

    def choices(self, v, req):
        """``n`` choices of each prompt: choice ``p * n + j`` is prompt ``p``'s ``j``-th, as OpenAI numbers them."""
        n = v.body.get("n") or 1
        return [choice for p, prompt in enumerate(v.state.prompts)
                for choice in copies(req.with_(**prompt_args(prompt, v.body)), n, p, p * n,
                                     **prompt_context(prompt, v.body))]
