"""OpenAI Chat Completions: the Python its table (spec/openai_chat.yaml) cannot say — message shapes
and the fold of chunks into one ``chat.completion``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..chat_request import Message, Tool, ToolCall
from ..errors import ApiError, invalid
from ..output_format import normalise
from .. import custom_tools, images
from .. import tool_choice
from ..speclang.machine import WireEvent
from .base import Protocol
from .choices import copies
from .common import (TextRuns, content_of, in_call_order, logprobs_rule, parse_logit_bias, place_system,
                     template_variables, token_logprobs, verbosity_note)

ASSISTANT_PARTS = {"text": "text", "refusal": "refusal"}
TOP_ALONE = "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled."  # (OpenAI's words)


def image_url_part(part: dict, where: str):
    """An ``image_url`` part (its url a string, or ``{url, detail}``; the schema checked which): a data URL."""
    url = part["image_url"]
    return images.from_url(url if isinstance(url, str) else url["url"], where)


# user turns (and tool results, which some clients send with a screenshot) may carry images
IMAGE_PARTS = {"image_url": image_url_part}


def parse_messages(value: list, body: dict, args: dict, v) -> None:
    """The shapes were checked by the spec's schema; this only reshapes."""
    msgs: list[Message] = []
    call_names: dict[str, str] = {}
    unnamed = any(not c.get("id") for m in value if m["role"] == "assistant" for c in m.get("tool_calls") or [])
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        role = m["role"]
        # an assistant turn may carry a refusal part (the model declined): its text is the turn's text
        content, parts = content_of(m.get("content"), f"{where}.content", IMAGE_PARTS if role in ("user", "tool")
                                    else {}, ASSISTANT_PARTS if role == "assistant" else None)
        name = m.get("name") or None  # a participant's name: the template gets it (Kimi's names the turn by it)
        if role in ("system", "developer"):
            msgs.append(Message("system", content, name=name))
        elif role == "user":
            msgs.append(Message("user", content, parts=parts, name=name))
        elif role == "assistant":
            if isinstance(m.get("refusal"), str) and m["refusal"]:  # the model declined (as the API returns it):
                content = "\n".join(t for t in (content, m["refusal"]) if t)  # its refusal is the turn's text
            calls = []
            for j, c in enumerate(m.get("tool_calls") or []):
                if c.get("type") == "custom":  # a custom tool's call goes back as the function of one string
                    call_id = c.get("id") or f"call_{i}_{j}"
                    call_names[call_id] = c["custom"]["name"]
                    calls.append(ToolCall(call_id, c["custom"]["name"],
                                          json.dumps({"input": c["custom"]["input"]}, ensure_ascii=False)))
                    continue
                fn = c["function"]
                arguments = fn.get("arguments", "")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                call_id = c.get("id") or f"call_{i}_{j}"
                call_names[call_id] = fn["name"]
                calls.append(ToolCall(call_id, fn["name"], arguments))
            msgs.append(Message("assistant", content, tool_calls=tuple(calls),
                                reasoning=m.get("reasoning_content") or m.get("reasoning"), name=name))
        else:
            call_id = m["tool_call_id"]
            if call_id not in call_names and not unnamed:  # (calls sent without ids: any result may be theirs)
                raise invalid(f"Invalid parameter: messages with role 'tool' must be a response to a preceding "
                              f"message with 'tool_calls' ({where}.tool_call_id {json.dumps(call_id)} answers no "
                              f"earlier call)", param=f"{where}.tool_call_id", code="invalid_value")
            msgs.append(Message("tool", content, parts=parts, tool_call_id=call_id,
                                name=call_names.get(call_id, m.get("name"))))
    asked = "continue_final_message" if body.get("continue_final_message") else prefilled(value)
    if asked:
        continue_final(value, msgs, body, args, asked)
    elif body.get("add_generation_prompt") is False:
        raise invalid("'add_generation_prompt': false is supported only with 'continue_final_message': true (the "
                      "answer then continues the final assistant message)", param="add_generation_prompt",
                      code="unsupported_value")
    args["messages"] = place_system([], in_call_order(msgs))
    args["system_note"] = verbosity_note(body.get("verbosity"))


PREFILL_KEYS = ("prefix", "partial")  # DeepSeek's and Mistral's spelling of a prefill, and Moonshot's


def prefilled(value: list) -> str | None:
    """Where the final message says it is a prefill in DeepSeek's and Mistral's spelling (``prefix: true``) or
    Moonshot's (``partial: true``): continued as with ``continue_final_message``. On any other message the key
    is refused by name (those APIs take it on the final assistant message alone), never dropped unseen."""
    for i, m in enumerate(value):
        for key in PREFILL_KEYS:
            if m.get(key) is True and (i != len(value) - 1 or m["role"] != "assistant"):
                raise invalid(f"'{key}': true at messages[{i}] is supported only on the final message, an "
                              f"assistant's (a prefill the answer continues)", param=f"messages[{i}].{key}",
                              code="invalid_value")
    return next((f"messages[{len(value) - 1}].{key}" for key in PREFILL_KEYS if value[-1].get(key) is True), None)


def continue_final(value: list, msgs: list[Message], body: dict, args: dict, asked: str) -> None:
    """``continue_final_message`` (vLLM's and SGLang's spelling of a prefill; ``asked``: the field that asks for
    it, as the errors name it): the answer continues the final message's text, which must be an assistant's,
    with text and no calls."""
    last = f"messages[{len(value) - 1}]"
    if body.get("add_generation_prompt") is True:
        raise invalid(f"Cannot set both '{asked}' and 'add_generation_prompt' to true",
                      param="add_generation_prompt", code="invalid_value")
    if value[-1]["role"] != "assistant" or msgs[-1].tool_calls or not msgs[-1].content:
        raise invalid(f"'{asked}' continues a final assistant message with text and no tool calls: "
                      f"{last} is not one", param=last, code="invalid_value")
    fmt = (body.get("response_format") or {}).get("type", "text")
    for param, refused in (("response_format", fmt != "text"),
                           ("tool_choice", tool_choice.forces(body.get("tool_choice")))):
        if refused:
            raise invalid(f"'{asked}' cannot be used with '{param}' {json.dumps(body[param])}: its "
                          "grammar starts where the answer starts", param=param, code="unsupported_prefill")
    args["continue_final"] = True
    args["final_where"] = last


def parse_tools(value: list, body: dict, args: dict, v) -> None:
    tools = []
    for i, t in enumerate(value):
        if t["type"] == "custom":
            where = f"tools[{i}].custom"
            spec = t["custom"]
            fmt = spec.get("format")
            if isinstance(fmt, dict) and isinstance(fmt.get("grammar"), dict):  # Chat nests the grammar one down
                spec = {**spec, "format": {"type": fmt.get("type"), **fmt["grammar"]}}
            tools.append(custom_tools.parse(spec, where))
            continue
        fn = t["function"]
        tools.append(Tool(fn["name"], fn.get("description") or "",
                          fn.get("parameters") or {"type": "object", "properties": {}}, strict=fn.get("strict") is True))
    args["tools"] = tools


def parse_tool_choice(value: Any, body: dict, args: dict, v) -> None:
    args["tool_choice"], args["tool_names"] = tool_choice.openai(value)


def parse_stop(value: Any, body: dict, args: dict, v) -> None:
    args["stop"] = (value,) if isinstance(value, str) else tuple(value)


def one_output_cap(body: dict, args: dict, v) -> None:
    """``max_tokens`` and ``max_completion_tokens`` with two different caps: refused in OpenAI's words (its code
    and param), not one of them chosen and the other dropped unseen. The same cap under both names drops nothing:
    clients that serve old and new local servers alike send it so (nanobot's OpenAI-compatible provider)."""
    capped, completion = body.get("max_tokens"), body.get("max_completion_tokens")
    if capped is not None and completion is not None and capped != completion:
        raise invalid("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported. (The "
                      "same cap under both names is taken.)", param="max_tokens", code="invalid_parameter_combination")


def thinking_type(body: dict, args: dict, v) -> None:
    """DeepSeek's ``thinking: {type: enabled | disabled}`` (pi's deepseek thinkingFormat) turns reasoning on or
    off where no other spelling set it (``reasoning_effort`` beside it says how much)."""
    if args.get("reasoning") is None:
        args["reasoning"] = body["thinking"]["type"] == "enabled"


def parse_output_format(value: dict, body: dict, args: dict, v) -> None:
    args["grammar"] = normalise(value, "response_format")


def parse_template_kwargs(value: dict, body: dict, args: dict, v) -> None:
    args["template_kwargs"] = template_variables(value, "chat_template_kwargs", ("enable_thinking", "reasoning_effort"))


@dataclass
class ChatState(TextRuns):
    """A Chat stream's bookkeeping (``vars`` in spec/openai_chat.yaml): the call open now, and the text runs."""

    call: dict | None = None
    logprobs: dict | None = None  # the text delta going out: its tokens' log probabilities, where asked


def text_run(m, ev) -> None:
    m.vars.text()
    m.vars.logprobs = {"content": token_logprobs(ev), "refusal": None} if m.context.get("logprobs") is True else None


def open_call(m, ev) -> None:
    """A call opens: a custom tool's (``custom``: its input streams) or a function's."""
    m.vars.called = True
    custom = ev.name in (m.context.get("custom_tools") or ())
    m.vars.call = {"custom": custom, "function": not custom, "arguments": "", "input": "", "input_delta": None}


def append_call(m, ev) -> None:
    call = m.vars.call
    call["arguments"] += ev.text
    if call["custom"]:
        now = custom_tools.input_of(call["arguments"])
        call["input_delta"], call["input"] = custom_tools.input_delta(call["input"], now), now


def finish_call(m, ev) -> None:
    """A custom call's input once its arguments are whole (text a reading in flight held back: the last delta)."""
    call = m.vars.call
    call["input_delta"] = None
    if call["custom"]:
        now = custom_tools.input_of(call["arguments"], done=True)
        call["input_delta"], call["input"] = custom_tools.input_delta(call["input"], now), now


class Chunks:
    """What folding any OpenAI chunk stream shares: the head fields of its first chunk, the usage of the chunk
    that carries one, the last finish_reason. ``choices`` yields each chunk's choices; an error chunk raises."""

    HEAD = ("id", "created", "model", "system_fingerprint")

    def __init__(self) -> None:
        self.head: dict = {}
        self.usage = None
        self.finish = None
        self.index = 0  # the choice the chunks are of (each machine answers one: ``choice`` in its templates)

    def choices(self, wire: list[WireEvent]):
        for w in wire:
            d = w.data
            if not isinstance(d, dict):
                continue
            if "error" in d:
                raise ApiError("server_error", d["error"].get("message", "generation failed"))
            self.head = self.head or {k: d[k] for k in self.HEAD}
            if d.get("usage"):
                self.usage = d["usage"]
            for choice in d.get("choices", []):
                self.index = choice.get("index", self.index)
                yield choice
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]

    def envelope(self, obj: str, choice: dict) -> dict:
        return {"id": self.head.get("id"), "object": obj, "created": self.head.get("created"),
                "model": self.head.get("model"), "system_fingerprint": self.head.get("system_fingerprint"),
                "choices": [choice], "usage": self.usage}


def fold_chat_completion(wire: list[WireEvent], body: dict) -> dict:
    """Chunks → one chat.completion, the way an SDK accumulates a stream."""
    chunks = Chunks()
    content: list[str] | None = None  # null until a delta says content (the role chunk's "", or text)
    reasoning: list[str] = []
    calls: dict[int, dict] = {}
    tokens: list[dict] = []  # the content chunks' log probabilities, in order (where asked)
    for choice in chunks.choices(wire):
        tokens += (choice.get("logprobs") or {}).get("content") or []
        delta = choice.get("delta", {})
        if delta.get("content") is not None:
            content = content if content is not None else []
            content.append(delta["content"])
        if delta.get("reasoning_content"):
            reasoning.append(delta["reasoning_content"])
        for tc in delta.get("tool_calls", []):
            if tc.get("type") == "custom":
                calls[tc["index"]] = {"id": None, "type": "custom", "custom": {"name": "", "input": ""}}
            call = calls.setdefault(tc["index"], {"id": None, "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            if tc.get("id"):
                call["id"] = tc["id"]
            if call["type"] == "custom":
                custom = tc.get("custom", {})
                call["custom"]["name"] += custom.get("name") or ""
                call["custom"]["input"] += custom.get("input") or ""
                continue
            fn = tc.get("function", {})
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
    message: dict = {"role": "assistant", "content": None if content is None else "".join(content), "refusal": None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    logprobs = {"content": tokens, "refusal": None} if body.get("logprobs") is True else None
    return chunks.envelope("chat.completion",
                           {"index": chunks.index, "message": message, "logprobs": logprobs, "finish_reason": chunks.finish})


class OpenAIChat(Protocol):
    name = "openai_chat"
    id_prefix = "chatcmpl-"

    def request_hooks(self):
        return {"messages": parse_messages, "tools": parse_tools, "tool_choice": parse_tool_choice,
                "stop": parse_stop, "template_kwargs": parse_template_kwargs, "output_format": parse_output_format,
                "one_output_cap": one_output_cap, "thinking_type": thinking_type, "logprobs": logprobs_rule(TOP_ALONE),
                "logit_bias": parse_logit_bias}

    def folds(self):
        return {"chat_completion": fold_chat_completion}

    def machine_hooks(self):
        return {"open_call": open_call, "append_call": append_call, "finish_call": finish_call, "text": text_run}

    def machine_state(self) -> ChatState:
        return ChatState()

    def extra_context(self, v) -> dict:
        return {"custom_tools": sorted(t.name for t in v.args.get("tools", ()) if t.custom)}

    def choices(self, v, req):
        return copies(req, v.body.get("n") or 1)
