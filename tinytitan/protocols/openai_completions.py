"""OpenAI Completions (legacy ``/v1/completions``): the Python its table (spec/openai_completions.yaml)
cannot say — the prompt's shapes, echo, and the fold of chunks into one ``text_completion``."""

from __future__ import annotations

import json
from typing import Any

from ..errors import invalid
from ..speclang.machine import WireEvent
from .base import Protocol
from .common import parse_logit_bias
from .openai_chat import Chunks, parse_stop


def prompt_text(body: dict) -> str:
    """The prompt's text: a string, or a list of one string (``parse_prompt`` refuses other shapes)."""
    value = body.get("prompt", "")
    return value[0] if isinstance(value, list) and value else value


def parse_prompt(value: Any, body: dict, args: dict, v) -> None:
    if isinstance(value, list):
        if value and all(isinstance(x, int) for x in value) or any(isinstance(x, list) for x in value):
            raise invalid("'prompt' as token ids is not supported: send the prompt as text", param="prompt",
                          code="unsupported_value")
        if len(value) != 1:
            raise invalid(f"'prompt' as a list of {len(value)} prompts is not supported: send one prompt per "
                          f"request", param="prompt", code="unsupported_value")
        if not isinstance(value[0], str):
            raise invalid(f"'prompt[0]' must be a string, not {json.dumps(value[0])[:40]}", param="prompt[0]",
                          code="invalid_type")
    if body.get("echo") and body.get("suffix") is not None:
        raise invalid("'echo' cannot be combined with 'suffix' (fill-in-the-middle)", param="echo",
                      code="unsupported_value")
    args["prompt"] = prompt_text(body)


def fold_text_completion(wire: list[WireEvent], body: dict) -> dict:
    """Chunks → one text_completion, the way an SDK accumulates a stream."""
    chunks = Chunks()
    text = [choice.get("text") or "" for choice in chunks.choices(wire)]
    return chunks.envelope("text_completion",
                           {"text": "".join(text), "index": 0, "logprobs": None, "finish_reason": chunks.finish})


class OpenAICompletions(Protocol):
    name = "openai_completions"
    id_prefix = "cmpl-"

    def request_hooks(self):
        return {"prompt": parse_prompt, "stop": parse_stop, "logit_bias": parse_logit_bias}

    def extra_context(self, v) -> dict:
        return {"prompt_text": prompt_text(v.body)}

    def folds(self):
        return {"text_completion": fold_text_completion}
