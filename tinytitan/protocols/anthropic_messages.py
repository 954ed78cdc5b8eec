"""Anthropic Messages: the Python its table (spec/anthropic_messages.yaml) cannot say — message and block
shapes, the thinking controls, block numbering in the stream, the stop reason, the fold of the wire events
into one ``message``, and count_tokens.

Rules (the issue's, where the API leaves a choice):
- Consecutive turns of one role combine (blocks concatenated), as the real API does. In a user turn the
  ``tool_result`` blocks fan out into one tool message each, leading the turn; its text follows as one user
  message. ``is_error`` results read ``Error: …``. Roles ``ctx`` / ``msg`` (newer Claude Code) are user turns.
- A ``role: "system"`` message in ``messages``: in first position it joins the system prompt; later it stays
  where it is, as a user turn wrapped in ``<system-reminder>`` (common.place_system), so the prompt ahead of
  it — and its cached prefix — is unchanged.
- ``thinking`` blocks sent back are their turn's reasoning, rendered where the template puts it (so a tool loop's
  next turn reads the answer as it was generated; ``clear_thinking_20251015`` clears older turns'); a
  ``redacted_thinking`` block carries nothing a model here reads. In a user turn either is refused, as the API
  refuses it, and so are an empty user turn and an empty text block in one (a ``tool_use`` id used twice is
  taken: clients have shipped bugs that send one, and an id only pairs a result with its call). A final
  assistant turn with text is a prefill: the answer continues its text (``ChatRequest.continue_final``) and holds only what follows it. As the
  API does, its text may not end in whitespace, and one with no text begins nothing; it is refused beside
  thinking enabled, a forced tool choice or an output format, whose start it would take.
- Reasoning: ``thinking.type: disabled`` (and ``between_tools``: the API's thinking off) is off; ``enabled`` maps ``budget_tokens`` onto the ladder in
  ``extra.thinking_budget_levels`` (refused only where Anthropic refuses: under 1024, or not under
  ``max_tokens``); otherwise ``output_config.effort`` names the level; ``adaptive`` alone (or no ``thinking``)
  leaves it to the server's default. ``enabled`` beside a forced tool choice is refused, as the API refuses it
  (anthropic_request.parse_tool_choice).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
import logging
import re
from typing import Any

from ..chat_request import Message
from ..errors import ApiError, invalid
from ..events import Finished
from ..output_format import normalise
from ..speclang.machine import Machine, WireEvent
from . import context_edits
from .anthropic_request import (
    CACHE_DIAGNOSIS_BETA, TURN_JOIN, _blocks, api_place, assistant_turn, block_texts, cache_diagnostics,
    check_user_content, parse_diagnostics, parse_output_format, parse_stop_sequences, parse_template_kwargs,
    parse_tool_choice, parse_tools, prefill_blocks, user_turn)
from .base import Protocol
from .common import arguments_object, in_call_order, place_system, reasoning_payload
from .wire import Call, Reply

log = logging.getLogger("tinytitan.anthropic")

USER_ROLES = ("user", "ctx", "msg")
ROLES = ("user", "assistant", "system") + USER_ROLES[1:]
MIN_BUDGET = 1024


def stop_reason(finished: Finished, client_stops: Any, table: dict) -> tuple[str, str | None]:
    """The one place a stop reason is decided (the stream's message_delta; the fold reads it from there).
    ``stop_sequence`` only for a string the client sent; any other stop is the model ending its turn."""
    if finished.reason == "stop_sequence":
        if isinstance(client_stops, list) and finished.stop_sequence in client_stops:
            return "stop_sequence", finished.stop_sequence
        return "end_turn", None
    return table[finished.reason], None


@dataclass
class MessagesRequest:
    """What a request's handling found (``Validated.state``): the context edits applied to it."""

    applied_edits: list[dict] | None = None


UNSIGNED = "tinytitan-unsigned"  # a shown thought's signature: not empty (see spec/anthropic_messages.yaml)


@dataclass
class MessagesState:
    """A Messages stream's bookkeeping (``vars`` in spec/anthropic_messages.yaml)."""

    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    block: int | None = None  # the content block open now
    next_block: int = 0
    closing: int | None = None  # the block a content_block_stop closes
    tool_name: str | None = None
    args_of: int | None = None  # the block whose streamed arguments args_text holds
    args_text: str = ""
    tool_input: str | None = None  # a finished call's input, as JSON text
    stop_reason: str | None = None
    stop_sequence: str | None = None
    diagnostics: dict | None = None  # the cache-diagnosis beta's object, when the request opted in
    thought: list[str] = field(default_factory=list)  # the thinking block open now, where its display is omitted
    signature: str = UNSIGNED  # the closing thinking block's signature


class AnthropicMessages(Protocol):
    name = "anthropic_messages"
    id_prefix = "msg_"

    def __init__(self, spec_directory=None):
        super().__init__(spec_directory)
        extra = self.spec.extra
        drop = extra.get("drop_system_blocks")
        self.drop_system = re.compile(drop) if drop else None
        self.budget_levels = [(bound, level) for bound, level in extra.get("thinking_budget_levels", [[None, "medium"]])]

    def wording_data(self, err: ApiError) -> dict:
        """``{place}``: the image an error names (``where``: ``messages[2].content[0].content[1]``) as the API's
        errors spell it (``messages.2.content.0.tool_result.content.1.image``), from which Claude Code drops that
        one image and retries (a message naming no place makes it drop every image of the latest turn with one)."""
        where = err.data.get("where")
        return {"place": f"{api_place(where)}.image"} if isinstance(where, str) else {}

    # -- request hooks ---------------------------------------------------------------------------------------
    def request_hooks(self):
        return {"messages": self.parse_messages, "system": self.parse_system, "tools": parse_tools,
                "tool_choice": parse_tool_choice, "stop_sequences": parse_stop_sequences,
                "reasoning": self.reasoning_rule, "template_kwargs": parse_template_kwargs,
                "output_config": self.parse_output_config, "output_format": parse_output_format,
                "diagnostics": parse_diagnostics}

    def system_texts(self, body: dict) -> list[str]:
        system = body.get("system")
        if system is None:
            return []
        if isinstance(system, str):
            return [system]
        out = []
        for block in system:
            text = block["text"]
            if self.drop_system is not None and self.drop_system.match(text):
                continue
            out.append(text)
        return out

    def parse_system(self, value: Any, body: dict, args: dict, v) -> None:
        self.system_texts(body)  # checked here; placed by parse_messages, which owns the message order

    def parse_messages(self, value: list, body: dict, args: dict, v) -> None:
        turns: list[tuple[str, list[tuple[str, dict]]]] = []  # (role, [(where, block)]) with runs combined
        for i, m in enumerate(value):
            where = f"messages[{i}]"
            role = "user" if m["role"] in USER_ROLES else m["role"]
            if m["role"] == "user":  # (ctx / msg turns: Claude Code's own, whose rules the API does not say)
                check_user_content(m["content"], where, i)
            blocks = [(f"{where}.content[{j}]", b) for j, b in enumerate(_blocks(m["content"]))]
            if isinstance(m.get("content"), str):
                blocks = [(f"{where}.content", blocks[0][1])]
            if turns and turns[-1][0] == role and role != "system":
                turns[-1][1].extend(blocks)
            else:
                turns.append((role, blocks))
        if turns and turns[-1][0] == "assistant":
            block_texts([(w, b) for w, b in turns[-1][1] if b["type"] != "tool_use"], "assistant")  # block kinds
            prefill = prefill_blocks(turns.pop()[1], body)
            if prefill:
                turns.append(("assistant", prefill))
                args["continue_final"] = True
                args["final_where"] = f"messages[{len(value) - 1}]"
        msgs: list[Message] = []
        names: dict[str, str] = {}
        offered = {t.get("name") for t in body.get("tools") or () if isinstance(t, dict)}
        for role, blocks in turns:
            if role == "system":
                msgs.append(Message("system", TURN_JOIN.join(block_texts(blocks, "system"))))
            elif role == "assistant":
                msgs.append(assistant_turn(blocks, names))
            else:
                msgs.extend(user_turn(blocks, names, offered))
        args["messages"] = place_system(self.system_texts(body), in_call_order(msgs))

    def parse_output_config(self, value: Any, body: dict, args: dict, v) -> None:
        if value.get("format") is not None:
            if body.get("output_format") is not None:
                raise invalid("Send the output format once: 'output_config.format' or 'output_format', not both",
                              param="output_format", code="invalid_value")
            args["grammar"] = normalise(value["format"], "output_config.format", ("json_schema",), strict=True)

    def reasoning_rule(self, body: dict, args: dict, v) -> None:
        """The cross-field reasoning rule (``request.rules``): thinking, output_config.effort and the template
        variables together, once."""
        betas = v.headers.get("anthropic-beta", "")
        level, budget = self.reasoning_of(body, interleaved="interleaved-thinking-" in betas)
        if level is not None:
            args["reasoning"] = level
        if budget is not None:
            args["reasoning_budget_tokens"] = budget

    def reasoning_of(self, body: dict, interleaved: bool = False) -> tuple[str | bool | None, int | None]:
        """``interleaved``: the request enables the interleaved-thinking beta, under which a thinking budget
        may exceed ``max_tokens`` (it spans the turn's tool calls), as Anthropic allows."""
        thinking = body.get("thinking")
        effort = None
        config = body.get("output_config")
        if config is not None:
            effort = config.get("effort")  # one of the spec's values (request.fields.output_config)
        if thinking is not None:
            kind = thinking["type"]  # one of the spec's types (request.fields.thinking); all but these leave the
            # level to effort or the server's default, as adaptive does. between_tools is thinking off (the API's
            # words: "thinking turned off", its progress updates between tool calls coming back as thinking blocks)
            if kind in ("disabled", "between_tools"):
                return False, None
            if kind == "enabled":
                budget = thinking.get("budget_tokens")
                if budget is None:
                    raise invalid("Missing required parameter: 'thinking.budget_tokens' (thinking type 'enabled')",
                                  param="thinking.budget_tokens", code="missing_required_parameter")
                if isinstance(budget, bool) or not isinstance(budget, int):
                    raise invalid("Invalid type for 'thinking.budget_tokens': expected an integer",
                                  param="thinking.budget_tokens", code="invalid_type")
                if budget < MIN_BUDGET:
                    raise invalid(f"'thinking.budget_tokens' must be at least {MIN_BUDGET}, got {budget}",
                                  param="thinking.budget_tokens", code="invalid_value")
                max_tokens = body.get("max_tokens")
                if isinstance(max_tokens, int) and budget >= max_tokens and not interleaved:
                    raise invalid(f"'max_tokens' ({max_tokens}) must be greater than 'thinking.budget_tokens' "
                                  f"({budget})", param="thinking.budget_tokens", code="invalid_value")
                return next(lvl for bound, lvl in self.budget_levels if bound is None or budget < bound), budget
        if effort is not None:
            return effort, None
        for name in ("chat_template_kwargs", "template_vars"):
            kwargs = body.get(name) or {}
            for key in ("reasoning_effort", "enable_thinking"):
                if kwargs.get(key) is not None:
                    return kwargs[key], None
        return None, None  # adaptive, or nothing said: the server's default

    # -- the machine -------------------------------------------------------------------------------------------
    def extra_context(self, v) -> dict:
        thinking = v.body.get("thinking") or {}
        edited = isinstance(v.body.get("context_management"), dict)  # the beta's answer: the edits applied
        applied = getattr(v.state, "applied_edits", None) or []
        return {"context_management": {"applied_edits": applied} if edited else None,
                "thinking_shown": thinking.get("display") != "omitted",
                # the cache-diagnosis beta: its header, or the request's ``diagnostics`` object, opts in
                "cache_diagnosis": CACHE_DIAGNOSIS_BETA in v.headers.get("anthropic-beta", "")
                or isinstance(v.body.get("diagnostics"), dict)}

    def machine_hooks(self):
        maps = self.spec.maps

        def diagnose(m: Machine) -> None:
            """Relative to ``diagnostics.previous_message_id`` where the request names one (as the API does),
            else to the longest prefix the cache holds (the beta header alone, or a null id)."""
            if m.context.get("cache_diagnosis"):
                named = (m.context["req"].get("diagnostics") or {}).get("previous_message_id")
                m.vars.diagnostics = cache_diagnostics(m.context.get("cache_compared" if named else "cache_miss"))

        def started(m: Machine, ev) -> None:
            m.vars.input_tokens, m.vars.cache_read_input_tokens = ev.prompt_tokens - ev.cached_tokens, ev.cached_tokens
            diagnose(m)

        def started_early(m: Machine, ev) -> None:
            m.vars.input_tokens, m.vars.cache_read_input_tokens = m.context.get("prompt_tokens", 0), 0
            diagnose(m)

        def open_block(m: Machine, ev) -> None:
            s = m.vars
            s.closing, s.block = s.block, s.next_block
            s.next_block += 1
            s.tool_name = getattr(ev, "name", None)

        def tool_args(m: Machine, ev) -> None:
            s = m.vars
            if s.args_of != s.block:
                s.args_of, s.args_text = s.block, ""
            s.args_text += ev.text

        def tool_done(m: Machine, ev) -> None:
            s = m.vars
            value = arguments_object(ev.arguments or (s.args_text if s.args_of == s.block else ""), s.tool_name,
                                     complete=ev.complete)  # a call cut short is {}, as on Ollama
            s.tool_input = json.dumps(value, ensure_ascii=False) if value else None

        def close_block(m: Machine, ev) -> None:
            m.vars.closing = m.vars.block

        def think(m: Machine, ev) -> None:
            if not m.context.get("thinking_shown", True):  # kept only where the signature must carry it
                m.vars.thought.append(ev.text)

        def sign(m: Machine, ev) -> None:
            s = m.vars
            s.signature, s.thought = (reasoning_payload("".join(s.thought)) if s.thought else UNSIGNED), []

        def finish(m: Machine, ev) -> None:
            m.vars.stop_reason, m.vars.stop_sequence = stop_reason(ev, m.context["req"].get("stop_sequences"),
                                                                   maps["stop_reason"])

        return {"started": started, "started_early": started_early, "open_block": open_block,
                "close_block": close_block, "tool_args": tool_args, "tool_done": tool_done, "finish": finish,
                "think": think, "sign": sign}

    def machine_state(self) -> "MessagesState":
        return MessagesState()

    # -- the fold ----------------------------------------------------------------------------------------------
    def folds(self):
        return {"message": self.fold_message}

    def fold_message(self, wire: list[WireEvent], body: dict) -> dict:
        """Wire events → one ``message``, the way the SDK accumulates a stream."""
        message: dict = {}
        blocks: dict[int, dict] = {}
        partial: dict[int, str] = {}
        for w in wire:
            d = w.data
            kind = d.get("type")
            if kind == "error":
                err = d["error"]
                raise ApiError(self._kind_of(err["type"]), err["message"])
            if kind == "message_start":
                message = dict(d["message"], content=[], usage=dict(d["message"]["usage"]))
            elif kind == "content_block_start":
                blocks[d["index"]] = dict(d["content_block"])
            elif kind == "content_block_delta":
                block, delta = blocks[d["index"]], d["delta"]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "signature_delta":
                    block["signature"] = delta["signature"]
                elif delta["type"] == "input_json_delta":
                    partial[d["index"]] = partial.get(d["index"], "") + delta["partial_json"]
            elif kind == "message_delta":
                message.update(d["delta"])
                message["usage"].update(d["usage"])
                if "context_management" in d:
                    message["context_management"] = d["context_management"]
        for index, text in partial.items():
            blocks[index]["input"] = arguments_object(text, blocks[index].get("name"))
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message

    def _kind_of(self, wire_type: str) -> str:
        if self.spec.error_kind("server_error").type == wire_type:
            return "server_error"  # api_error is also 501's type: a failed generation is a 500
        return next((k for k, e in self.spec.error_kinds.items() if e.type == wire_type), "server_error")

    # -- routes ------------------------------------------------------------------------------------------------
    def handlers(self):
        return {"generate": self.generate, "count_tokens": self.count_tokens}

    def request_state(self) -> "MessagesRequest":
        return MessagesRequest()

    async def generate(self, call: Call) -> Reply:
        """As every protocol's, with ``context_management``'s tool-result clearing applied first
        (context_edits.py); the answer reports the edits applied."""
        v = await self.checked(call)
        req = self.engine.apply_model(self.chat_request(v))
        edits = context_edits.parse(v.body.get("context_management"))
        if edits:
            req, v.state.applied_edits = await context_edits.apply(edits, req, self._prompt_tokens)
        return await self.respond(v, req)

    async def _prompt_tokens(self, req) -> int:
        try:
            return await self.engine.count_tokens(req)
        except ApiError as exc:  # a backend that cannot count: no token threshold is ever passed
            if exc.code != "not_implemented":
                raise
            return 0

    async def count_tokens(self, call: Call) -> Reply:
        v = await self.checked(call, "count_tokens")
        req = self.engine.apply_model(self.chat_request(v))
        if not isinstance(v.body.get("context_management"), dict):
            return Reply({"input_tokens": await self.engine.count_tokens(req)})
        # the context-management beta: the count after the edits, and before them
        edits = context_edits.parse(v.body["context_management"])
        original = await self.engine.count_tokens(req)
        edited, applied = await context_edits.apply(edits, req, self._prompt_tokens)
        tokens = await self.engine.count_tokens(edited) if applied else original
        return Reply({"input_tokens": tokens, "context_management": {"original_input_tokens": original}})


