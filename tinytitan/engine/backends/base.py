"""The backend interface: a model, its card, and decoding; prompt preparation (``prepare.py``) is its other half.

``prepare(req)`` renders the prompt with the tokenizer's own chat template and checks it fits the
context window (ApiError otherwise, before any stream opens). The model family (``families.detect``, from
the tokenizer's template and vocabulary) maps the roles before rendering, says whether the prompt already
opened the reasoning channel, and gives the output parser (``parser(prepared)``). ``decode(prepared, loop, should_stop)``
runs in a worker thread and reports tokens to a DecodeLoop; it returns soon after ``should_stop()``
turns true (within a token).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any, Callable

from ...chat_request import ChatRequest, Message
from ..decode.token_events import DecodeLoop
from ..families import Family, detect, template_source
from ..prompt.raw import VerbatimParser
from ..decode.call_limit import CallLimit, call_limit
from ..decode.forced_call import ForcedCall
from ..prompt.prepare import FALLBACK_SAMPLING, Prepared, PromptPreparation
from ..cache.handoff import HandOffs, or_handed

log = logging.getLogger("tinytitan.backend")


class Backend(PromptPreparation, ABC):
    model_id: str = "model"
    context_window: int = 32768
    tokenizer: Any = None  # mlx-lm TokenizerWrapper, or None for a backend without one
    config: dict | None = None  # the model's config.json, where there is one
    default_reasoning: str | bool | None = None
    sampling: dict = FALLBACK_SAMPLING  # the model's own defaults (generation_config.json), per key
    default_system: str | None = None  # the model's system prompt for a conversation that sends none
    default_stop: tuple[str, ...] = ()  # the model's stop strings for a request that sends none
    default_history: tuple[Message, ...] = ()  # the model's own turns, before every conversation's
    _family: Family | None = None
    _longest_token: int | None = None

    @property
    def family(self) -> Family:
        if self._family is None:
            self._family = detect(self.tokenizer, self.config)
        return self._family

    def start(self, prepared: "Prepared", model, reuse: bool = True,
              handed: HandOffs | None = None) -> tuple[Any, int, int]:
        """Where a generation's decoding starts: (a KV cache holding the prompt's first n tokens, n, how many of
        those n the prompt cache held), else a new cache and 0, 0 (the decode step's forward holds it from then
        on). A vision model reads its images here too (``prompt_prefix``, vision.py), so n may pass what was
        cached. ``reuse`` False: a new cache whatever is cached (a row that reads its whole prompt for its
        tokens' log probabilities: decode/logprobs.py; a raw prompt, so no images). ``handed``: the row's
        engine's hand-offs, where a prompt its request's first choice read may be held (cache/handoff.py)."""
        if not reuse:
            return self.new_cache(model), 0, 0
        kv, read, cached = self.prompt_prefix(model, prepared, handed)
        if kv is None:
            return self.new_cache(model), 0, 0
        return kv, read, cached

    def prompt_prefix(self, model, prepared: "Prepared", handed: HandOffs | None = None) -> tuple[Any, int, int]:
        """(a cache holding the prompt's first n tokens, or None for a new one; n; how many of those n the
        prompt cache held): here the longest cached prefix, its images compared by digest, or the prompt
        ``handed`` on by its request's first choice where that holds more."""
        kv, n = or_handed(handed, prepared,
                          *self.prompt_cache.fetch(prepared.tokens, prepared.image_runs, prepared.shared))
        return kv, n, n

    def speculator(self, prepared: "Prepared", loop, tokens: list[int]):
        """The request's drafting for speculative decoding (None: it decodes without drafts; the MLX backend's
        is prompt lookup or a draft model)."""
        return None

    def parser(self, prepared: "Prepared"):
        req = prepared.req
        if req.prompt is not None:  # a raw prompt: the model's text as written, markers and all
            return VerbatimParser()
        # calls are read beside an output format only under auto (its grammar admits the document or calls)
        calls = bool(req.tools) and req.tool_choice != "none" and (req.grammar is None or req.tool_choice == "auto")
        # a prefill's text goes on, unless it ends where a thought opens: that thought starts with the answer
        continues = req.continue_final and not self.family.starts_in_reasoning(prepared.prompt_text)
        parser = self.family.parser(prepared.start_in_reasoning, prepared.namespaces, prepared.tool_schemas, calls,
                                    continues)
        if calls and req.tool_choice == "required":  # markup cut short is an incomplete call, never text
            parser = ForcedCall(parser, list(req.tool_names) or [t.name for t in req.tools], prepared.namespaces)
        limit = call_limit(req)
        return CallLimit(parser, limit, prepared.grammar is None) if calls and limit is not None else parser

    def warm(self) -> None:
        """Render and tokenize a tiny conversation once, so the first request does not pay for compiling the
        chat template (~0.1 s measured on 2 cores)."""
        if self.tokenizer is None:
            return
        try:
            self.encode(ChatRequest(model=self.model_id, messages=(Message("user", "hi"),)))
        except Exception:  # a template that cannot render this: the first real request says why
            log.debug("%s: the chat template did not render a warm-up conversation", self.model_id, exc_info=True)

    @abstractmethod
    def decode(self, prepared: Prepared, loop: DecodeLoop, should_stop: Callable[[], bool]) -> None:
        ...

    #: whether the model reads images (a vision model); a text model's requests with images are refused
    takes_images: bool = False

    def limits(self) -> dict:
        """The model card's numbers and features, read from its config and its chat template: the context
        window; the output cap (the context window: an answer is capped only by the room the prompt leaves);
        ``features``: tools (the template renders tool definitions), reasoning (its thinking switch, effort
        ladder or thinking markup), structured output (grammar masks are built over the tokenizer)."""
        src = template_source(self.tokenizer)
        reasoning = self.template_reasoning
        levels = list(reasoning.ladder) or (["off", "on"] if reasoning.binary else [])
        return {"context_window": self.context_window, "max_output_tokens": self.context_window,
                "input_modalities": ["text", "image"] if self.takes_images else ["text"],
                "features": {"tools": "tools" in src, "reasoning": self.thinks(src), "reasoning_levels": levels,
                             "structured_output": self.tokenizer is not None}}

    def describe(self) -> dict:
        return {"id": self.model_id, **self.limits()}

    def thinks(self, src: str) -> bool:
        """Whether the model writes a thought: its template's thinking switch or effort ladder, Harmony's
        analysis channel, or thinking markup in a template with no switch (a model that always thinks)."""
        reasoning = self.template_reasoning
        markup = self.family.markup if self.tokenizer is not None else None
        return bool(reasoning.binary or reasoning.ladder) or (self.tokenizer is not None and self.family.harmony) \
            or bool(markup and markup.think_open and markup.think_open in src)

    def card(self) -> dict:
        """What a client may want to show about the model: its family, chat template and capabilities (Ollama's
        names; ``thinking`` for every model that thinks, as Ollama lists it for an always-thinking one), and its
        fill-in-the-middle prompt (``{prefix}``, ``{suffix}``) where it has one."""
        source = template_source(self.tokenizer)
        capabilities = ["completion"]
        if "tools" in source:
            capabilities.append("tools")
        if self.thinks(source):
            capabilities.append("thinking")
        fim = self.fim_layout
        if fim:
            capabilities.append("insert")
        if self.takes_images:
            capabilities.append("vision")
        return {**self.describe(), "family": self.family.name, "template": source, "capabilities": capabilities,
                "architecture": (self.config or {}).get("model_type") or self.family.name,
                "system": self.default_system, "stop": list(self.default_stop),
                "fill_in": fim[1] if fim else None}  # the prompt with a gap: FIM_LAYOUTS

    @property
    def loaded(self) -> bool:
        return True

    def ensure_loaded(self):
        """Make the weights resident (a catalog calls this before decoding on a model)."""
        return None

    def unload(self) -> bool:
        """Free what can be freed; False where there is nothing to free."""
        return False
