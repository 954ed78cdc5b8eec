"""The backend interface, and the prompt preparation every tokenizer-backed backend shares.

``prepare(req)`` renders the prompt with the tokenizer's own chat template and checks it fits the
context window (ApiError otherwise, before any stream opens). ``decode(prepared, loop, should_stop)``
runs in a worker thread and reports tokens to a DecodeLoop; it returns soon after ``should_stop()``
turns true (within a token).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from ..chat_request import ChatRequest
from ..errors import invalid
from .decode_loop import DecodeLoop
from .output_parser import QWEN, Markup
from .prompt import template_messages, template_tools
from .reasoning import TemplateReasoning, level_of

log = logging.getLogger("tinytitan.backend")


@dataclass
class Prepared:
    req: ChatRequest
    tokens: list[int]
    max_tokens: int
    start_in_reasoning: bool = False
    namespaces: dict[str, str] = field(default_factory=dict)
    prompt_text: str = ""


class Backend(ABC):
    model_id: str = "model"
    context_window: int = 32768
    markup: Markup = QWEN
    tokenizer: Any = None  # mlx-lm TokenizerWrapper, or None for a backend without one
    default_reasoning: str | bool | None = None

    @property
    def template_reasoning(self) -> TemplateReasoning:
        return TemplateReasoning.of(getattr(self.tokenizer, "chat_template", None))

    def render(self, req: ChatRequest) -> str:
        kwargs = dict(req.template_kwargs)
        default = level_of(self.default_reasoning, None)
        kwargs.update(self.template_reasoning.kwargs(level_of(req.reasoning, default)))
        if req.reasoning_budget_tokens is not None:
            log.info("reasoning budget of %d tokens accepted, not enforced (the template's level decides)",
                     req.reasoning_budget_tokens)
        tools = template_tools(req)
        return self.tokenizer.apply_chat_template(
            template_messages(req), tools=tools, add_generation_prompt=True, tokenize=False, **kwargs
        )

    def encode(self, req: ChatRequest) -> tuple[str, list[int]]:
        """The rendered prompt and its tokens."""
        text = self.render(req)
        return text, list(self.tokenizer.encode(text, add_special_tokens=False))

    def prepare(self, req: ChatRequest) -> Prepared:
        text, tokens = self.encode(req)
        room = self.context_window - len(tokens)
        if room < 1:
            raise invalid(f"The prompt is {len(tokens)} tokens, which does not fit the model's context window "
                          f"of {self.context_window} tokens", param="messages", code="context_length_exceeded")
        max_tokens = room if req.max_tokens is None else min(req.max_tokens, room)
        opener = self.markup.think_open
        start_in_reasoning = bool(opener) and text.rstrip().endswith(opener)
        namespaces = {t.name: t.namespace for t in req.tools if t.namespace}
        return Prepared(req, tokens, max_tokens, start_in_reasoning, namespaces, text)

    def count_tokens(self, req: ChatRequest) -> int:
        """The prompt's length as ``prepare`` renders it (a prompt too long to run is still counted)."""
        return len(self.encode(req)[1])

    @abstractmethod
    def decode(self, prepared: Prepared, loop: DecodeLoop, should_stop: Callable[[], bool]) -> None:
        ...

    def describe(self) -> dict:
        return {"id": self.model_id, "context_window": self.context_window}

    @property
    def loaded(self) -> bool:
        return True

    def ensure_loaded(self):
        """Make the weights resident (a catalog calls this before decoding on a model)."""
        return None

    def unload(self) -> bool:
        """Free what can be freed; False where there is nothing to free."""
        return False
