"""The chat template's part of prompt preparation (``prepare.py``): a ChatRequest rendered as the model reads it,
and how many of a rendered prompt's ids a later turn of its conversation repeats.

Rules:
- The template's variables are the client's own (``chat_template_kwargs``), then the reasoning level's (the
  request's, else the server's default), in that order: the level's spelling wins.
- The generation prompt opens the assistant's turn (``add_generation_prompt``). Its *transient opening* is what
  it writes that the template does not write once that turn is answered: Qwen3's empty think block with its
  thinking off (``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n`` for the turn generated, the same header then
  the answer once a user turn follows), DeepSeek-V3.1's ``<think>``; none for plain ChatML. It is measured once per
  tokenizer and template variables, in ids, from one user message rendered alone, then with the generation
  prompt, then answered and followed by another user message, then answered with a tool call and followed by its
  result (a tool loop going on) — both again with the answer's thought sent back where the opening leaves the
  model thinking —, then followed by another user message at once (a fork): the opening's ids past the most any
  answered turn keeps of them. So every request that repeats the answer parts from the entry within the opening,
  whatever follows it: a side request that supersedes the entry leaves nothing of it to a tool loop going on.
  None where the texts do not start alike (or the template refuses them), an answered turn keeps none of the
  opening or some keeps all of it (MiniMax-M2 keeps a thought sent back in a tool loop), or what they keep does
  not tell the assistant's turn from the fork's user turn. (A template that refuses the fork, or merges the two
  user messages into one turn, has no user turn there to be told apart.) Not covered: a request that ends with
  the answer itself (a client's continuation of it, or a rollback to it): Qwen3 writes the empty block again
  around an assistant message that comes last, so such a request would have read the superseded entry's answer
  too, and reads that answer and the opening again instead.
- A request that continues its final assistant message (``continue_final``: a prefill) is rendered without the
  generation prompt and cut where that message's text ends (the template's ``continue_final_message``). A
  template that does not write the text as sent leaves no place to continue it: a 400 naming the message.
- ``lasting_prompt`` of a prompt is how many of its ids a later turn of its conversation repeats: all but its
  transient opening, where its ids end with that opening's (else None). The prompt cache's entries know it, so the
  next turn supersedes the last one's entry, where it parts there only (cache/memory.py). A request that forks the
  conversation there (a user turn where the assistant's was: a client's side request) parts before that.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Sequence

import numpy as np

from ...chat_request import ChatRequest, Message, ToolCall
from ...errors import invalid
from ..cache.prefix_index import common_prefix
from ..families import template_source
from .messages import template_messages, template_tools
from .reasoning import TemplateReasoning, level_of
from .tokenizer_facts import checked_prompt_ids, id_count, ids_of, once_per_tokenizer
from .tool_declarations import ToolDeclarations

log = logging.getLogger("tinytitan.backend")


TRANSIENT_OPENINGS_KEPT = 64  # template variables whose transient opening is kept, per tokenizer

_TRANSIENT_OPENINGS: dict[int, tuple[Any, dict[str, tuple[int, ...] | None]]] = {}  # id(tokenizer) -> ...

# plain conversations a served model's template must render at least one of (``template_failure``)
PROBES = ((Message("user", "Hi."),),
          (Message("system", "Be brief."), Message("user", "Hi.")),
          (Message("user", "Hi."), Message("assistant", "Hello."), Message("user", "Hi.")))


class TemplateRendering(ToolDeclarations):
    """A part of prompt preparation (``prepare.py``): the template's text for a request."""

    @property
    def template_reasoning(self) -> TemplateReasoning:
        return TemplateReasoning.of(getattr(self.tokenizer, "chat_template", None))

    def template_kwargs(self, req: ChatRequest) -> dict:
        """The template's variables for ``req`` (see the rules)."""
        kwargs = dict(req.template_kwargs)
        default = level_of(self.default_reasoning, None)
        kwargs.update(self.template_reasoning.kwargs(level_of(req.reasoning, default)))
        return kwargs

    def render(self, req: ChatRequest) -> str:
        kwargs = self.template_kwargs(req)
        if req.reasoning_budget_tokens is not None:
            log.info("reasoning budget of %d tokens accepted, not enforced (the template's level decides)",
                     req.reasoning_budget_tokens)
        req = self.with_tool_declarations(req)
        messages, tools = self.family.map_roles(template_messages(req, self.default_system, self.default_history),
                                                template_tools(req),
                                                template_source(self.tokenizer))
        if not req.continue_final:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs
            )
        try:  # the prompt ends where the final message's text ends: the template's end of turn is cut
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=False, continue_final_message=True, tokenize=False,
                **kwargs)
        except ValueError as exc:  # a template that rewrites or drops the text: there is no place to continue it
            last = req.final_where or f"messages[{len(req.messages) - 1}]"
            raise invalid(f"The model's chat template does not write the final assistant message ({last}) as sent, "
                          f"so its text cannot be continued: {str(exc).splitlines()[0]}", param=last,
                          code="template_error") from None

    def template_failure(self) -> str | None:
        """Why the chat template renders none of a few plain conversations (``PROBES``): a syntax error, a stub
        that always raises, code that fails on any message; None where it renders one. A template that refuses
        only some conversations (a system message, as Gemma's first templates did) is served: the refusal is
        that request's 400 (render_failures.py)."""
        first = None
        for turns in PROBES:
            try:
                self.render(ChatRequest(model=self.model_id, messages=turns))
                return None
            except Exception as exc:  # (whatever it raises: the same would answer every request)
                first = first or exc
        line = getattr(first, "lineno", None)
        text = f"{type(first).__name__}: {str(first).strip() or '(no message)'}".splitlines()[0][:300]
        return text + (f" (line {line})" if line else "")

    def transient_opening(self, kwargs: dict) -> tuple[int, ...] | None:
        """The ids the template writes to open a turn it generates but not once that turn is answered, under these
        variables (see the rules); None where there are none, none can be told apart, or the template refuses
        the probe's conversation."""
        key = json.dumps(kwargs, sort_keys=True, default=repr)
        known = once_per_tokenizer(_TRANSIENT_OPENINGS, self.tokenizer, dict)
        try:
            return known[key]
        except KeyError:  # (another thread may clear the table between any two of these lines)
            pass
        opening = self._measure_transient_opening(kwargs)
        if len(known) >= TRANSIENT_OPENINGS_KEPT:
            known.clear()
        known[key] = opening
        return opening

    def _measure_transient_opening(self, kwargs: dict) -> tuple[int, ...] | None:
        def text(turns: tuple[Message, ...], opening: bool = False) -> str:
            messages, _ = self.family.map_roles(
                template_messages(ChatRequest(model="", messages=turns), self.default_system, self.default_history),
                None, template_source(self.tokenizer))
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=opening, tokenize=False,
                                                      **kwargs)

        asked, call = (Message("user", "x"),), ToolCall("call_0", "f", "{}")

        def answered(reasoning: str | None) -> list[str]:  # followed by a user message; by its call's result
            return [text(asked + (Message("assistant", "Qz", reasoning=reasoning), Message("user", "y"))),
                    text(asked + (Message("assistant", "Qz", (call,), reasoning=reasoning),
                                  Message("tool", "r", tool_call_id="call_0", name="f")))]

        try:
            before, generating = text(asked), text(asked, True)
            # where the opening leaves the model thinking, its thought may come back with the answer
            answers = answered(None) + (answered("R") if self.family.starts_in_reasoning(generating) else [])
        except Exception:  # a template that refuses these conversations or variables: none known
            return None
        try:
            forked = text(asked + (Message("user", "y"),))
        except Exception:  # a template that refuses two user turns in a row: no fork there to tell apart
            forked = ""
        if not (generating.startswith(before) and all(t.startswith(before) for t in answers)):
            return None

        def ids(t: str) -> list[int]:
            return ids_of(self.tokenizer)(t[len(before):])

        opening = np.array(ids(generating), dtype=np.int64)
        kept = max(common_prefix(opening, np.array(ids(t), dtype=np.int64)) for t in answers)
        if kept == 0 or kept == len(opening):
            return None  # nothing kept, or some later turn keeps it all
        if forked.startswith(before) and common_prefix(opening[:kept], np.array(ids(forked), dtype=np.int64)) == kept:
            return None  # what is kept does not tell the assistant's turn from a user turn written there
        return tuple(int(i) for i in opening[kept:])

    def lasting_prompt(self, tokens: Sequence[int], req: ChatRequest) -> int | None:
        """How many of a prompt's ids a later turn of its conversation repeats: all but the template's transient
        opening at its end (see the rules); None for a raw prompt, a template without one, or ids that do not end
        with it."""
        if req.prompt is not None:
            return None
        transient = self.transient_opening(self.template_kwargs(req))
        if transient is None or len(transient) >= len(tokens):
            return None
        start = len(tokens) - len(transient)
        return start if tuple(tokens[start:]) == transient else None

    def raw_ids(self, req: ChatRequest) -> tuple[str, list[int]]:
        """A raw prompt sent as token ids (``req.prompt_ids``): its text, and the ids as sent, each one the model's
        logits and its tokenizer both know (else the client's 400 naming ``prompt``)."""
        tokens = checked_prompt_ids(req.prompt_ids or (), getattr(self, "vocab_size", None), id_count(self.tokenizer))
        return self.tokenizer.decode(tokens), tokens
