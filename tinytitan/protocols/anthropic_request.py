"""Anthropic Messages: the request's fields the tables cannot say — content blocks (images, tool results and the
tool references that load deferred tools, thinking sent back) into turns, tools, tool choice, stop sequences,
template variables, and the cache diagnostics a request asks for."""

from __future__ import annotations

import json
import re

from .. import images, tool_choice
from ..chat_request import ImagePart, Message, Tool, ToolCall
from ..errors import invalid
from ..output_format import normalise
from .common import template_variables, thought_of

TEMPLATE_REASONING_KEYS = ("enable_thinking", "reasoning_effort")  # reasoning controls, read as such


def _blocks(content: str | list) -> list[dict]:
    """A message's content (a string or an array of blocks, checked by the spec's schema) as blocks."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def api_place(where: str) -> str:
    """An image's place (``messages[3].content[0].content[1]``) as the API's errors spell it, pydantic's way with
    the block type after a tagged one (``messages.3.content.0.tool_result.content.1``; in a document's custom
    content, ``….document.source.content.content.1``): Claude Code reads the place of a refused image in that
    spelling, to drop that one block. ``speclang.paths.loc`` spells the places the validator names, from the body
    and the spec's ``tagged`` table; an image error is raised later (in the engine, or by the fetcher before
    validation) from the place alone, so the shapes are read from the path here."""
    dotted = re.sub(r"\[(\d+)\]", r".\1", where)
    dotted = re.sub(r"^(messages\.\d+\.content\.\d+)\.content\.", r"\1.tool_result.content.", dotted)
    return re.sub(r"\.source\.content\.(\d+)$", r".document.source.content.content.\1", dotted)


def image_block(block: dict, where: str) -> ImagePart:
    """An ``image`` block (its shape checked by the spec): base64 data, or a data URL (a remote URL reaches
    here only when fetching is off, and is refused by name). Base64 data of another format than its declared
    ``media_type`` is refused, as the API refuses it."""
    source = block["source"]
    if source["type"] == "url":
        return images.from_url(source["url"], where)
    image = images.from_base64(source["data"], source["media_type"], where)
    return images.check_declared(image, place=f"{api_place(where)}.image.source.base64.data")


def document_parts(block: dict, where: str) -> tuple:
    """A ``document`` block whose source is plain text or custom content (text blocks, joined by a blank line, and
    images; the spec refuses every other source, and citations) as what the model reads: in the tags Anthropic's
    long-context guidance lays documents out in, with its ``title`` and ``context`` where given, each image an
    ``ImagePart`` where it stands among the text (a model without vision refuses it, naming it)::

        <document>
        <title>…</title>
        <context>…</context>
        <document_content>
        …
        </document_content>
        </document>
    """
    source = block["source"]
    content = source["data"] if source["type"] == "text" else source["content"]
    head = ["<document>", *(f"<{key}>{block[key]}</{key}>" for key in ("title", "context") if block.get(key))]
    pieces: list = ["\n".join([*head, "<document_content>", ""])]
    after_text = False  # a text block just read: the next one follows a blank line
    for j, b in enumerate([{"type": "text", "text": content}] if isinstance(content, str) else content):
        if b["type"] == "image":
            pieces.append(image_block(b, f"{where}.source.content[{j}]"))
            after_text = False
        elif isinstance(pieces[-1], str):
            pieces[-1] += ("\n\n" if after_text else "") + b["text"]
            after_text = True
        else:
            pieces.append(b["text"])
            after_text = True
    tail = "\n</document_content>\n</document>"
    if isinstance(pieces[-1], str):
        pieces[-1] += tail
    else:
        pieces.append(tail.lstrip("\n"))
    return tuple(pieces)


def search_result_parts(block: dict, where: str) -> tuple:
    """A ``search_result`` block (its shape checked by the spec: text blocks, citations off) as the text the model
    reads, laid out as a document is, so the model can name the source it answers from::

        <search_result>
        <source>…</source>
        <title>…</title>
        <search_result_content>
        …
        </search_result_content>
        </search_result>
    """
    body = "\n\n".join(b["text"] for b in block["content"])
    return ("\n".join(["<search_result>", f"<source>{block['source']}</source>", f"<title>{block['title']}</title>",
                       "<search_result_content>", body, "</search_result_content>", "</search_result>"]),)


# the blocks read into the prompt as text (and the images a document holds), each as its parts in order
READABLE = {"document": document_parts, "search_result": search_result_parts}


def _texts(parts: tuple) -> str:
    """The text of a readable block's parts (a document's text around an image it holds: a blank line)."""
    return "\n\n".join(p for p in parts if isinstance(p, str))


def _tool_result(block: dict, where: str) -> tuple[str, tuple]:
    """A tool result's text (``Error: …`` when it failed) and its parts, where it holds images (the spec checked
    each block's shape and type)."""
    content = block.get("content")
    if not isinstance(content, list):
        text, parts = content or "", ()
    else:
        texts, pieces = [], []
        for j, b in enumerate(content):
            at = f"{where}.content[{j}]"
            if b["type"] == "tool_reference":  # it loads tools (_tool_references): it is not text
                continue
            new = (image_block(b, at),) if b["type"] == "image" else \
                READABLE[b["type"]](b, at) if b["type"] in READABLE else (b["text"],)
            if any(isinstance(p, str) for p in new):
                texts.append(_texts(new))
            pieces.extend(new)
        text = "\n".join(texts)
        parts = tuple(pieces) if any(isinstance(p, ImagePart) for p in pieces) else ()
    if block.get("is_error") is not True:
        return text, parts
    return f"Error: {text}", (("Error:",) + parts if parts else ())


def _tool_references(block: dict, where: str, offered: set[str]) -> tuple[str, ...]:
    """The tools a tool result loads (a tool search's answer: ``tool_reference`` blocks), each offered in
    ``tools`` (a reference to a tool that is not is refused, naming it)."""
    content = block.get("content")
    names = []
    for j, part in enumerate(content if isinstance(content, list) else ()):
        if isinstance(part, dict) and part.get("type") == "tool_reference":
            name = part["tool_name"]
            if name not in offered:
                raise invalid(f"Tool reference '{name}' at {where}.content[{j}] names a tool that is not in 'tools'",
                              param=f"{where}.content[{j}].tool_name", code="invalid_value")
            names.append(name)
    return tuple(names)


CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"


# the engine's reasons for a prompt-cache miss (its ``cache_miss`` data) → the beta's ``cache_miss_reason`` types
CACHE_MISS_TYPES = {"cold": "previous_message_not_found", "system_changed": "system_changed",
                    "tools_changed": "tools_changed", "messages_changed": "messages_changed",
                    "thinking_dropped": "messages_changed", "answer_rewritten": "messages_changed",
                    "template_rerender": "messages_changed"}  # any other reason: "unavailable"


def cache_diagnostics(miss: dict | None) -> dict | None:
    """The response's ``diagnostics``: None when the prompt parted from nothing the cache held (a hit);
    ``cache_missed_input_tokens`` (on the ``*_changed`` types) is the cached tokens past the divergence."""
    if not miss or miss.get("reason") == "hit":
        return None
    kind = "previous_message_not_found" if miss["reason"] == "not_found" else \
        CACHE_MISS_TYPES.get(miss["reason"], "unavailable")
    reason: dict = {"type": kind}
    if kind.endswith("_changed"):
        reason["cache_missed_input_tokens"] = int(miss.get("missed_tokens") or 0)
    return {"cache_miss_reason": reason}


def with_examples(description: str, examples: list[dict] | None) -> str:
    """A tool's description with its ``input_examples`` (the API shows them to the model with the tool's
    definition; a template declares a tool by name, description and parameters only)."""
    if not examples:
        return description
    shown = "\n".join(json.dumps(e, ensure_ascii=False) for e in examples)
    return f"{description}\n\nExample inputs:\n{shown}" if description else f"Example inputs:\n{shown}"


def parse_tools(value: list, body: dict, args: dict, v) -> None:
    tools, seen = [], set()
    for i, t in enumerate(value):
        where, name = f"tools[{i}]", t["name"]
        if name in seen:
            raise invalid(f"Tool names must be unique: '{name}' at {where} is declared twice", param=f"{where}.name",
                          code="invalid_value")
        seen.add(name)
        callers = t.get("allowed_callers")
        if callers is not None and "direct" not in callers:  # only code execution may call it: none runs here
            raise invalid(f"'allowed_callers' at {where} without 'direct' is not supported: there is no code "
                          "execution here to call the tool from", param=f"{where}.allowed_callers",
                          code="unsupported_value")
        tools.append(Tool(name, with_examples(t.get("description") or "", t.get("input_examples")),
                          t["input_schema"],  # cache_control, eager_input_streaming: nothing to do here
                          strict=t.get("strict") is True, deferred=t.get("defer_loading") is True))
    if tools and all(t.deferred for t in tools):  # the model would be told of no tool, nor how to call one
        raise invalid("All tools have 'defer_loading' set: at least one tool must not be deferred (the tool search "
                      "that loads the others)", param="tools", code="invalid_value")
    args["tools"] = tools


def parse_diagnostics(value: dict, body: dict, args: dict, v) -> None:
    """``diagnostics.previous_message_id``: the cache diagnosis compares this prompt with that message's."""
    named = value.get("previous_message_id")
    if named is not None:
        args["cache_compare"] = named


def parse_output_format(value: dict, body: dict, args: dict, v) -> None:
    args["grammar"] = normalise(value, "output_format", ("json_schema",), strict=True)


def parse_tool_choice(value: dict, body: dict, args: dict, v) -> None:
    """As the API does, a forced call (``any``, ``tool``) beside thinking enabled is refused, in its words: the
    call would begin the answer, where no thought can come first (here it would be decoded with thinking off)."""
    args["tool_choice"], args["tool_names"] = tool_choice.anthropic(value)
    thinking = body.get("thinking")
    if value.get("type") in ("any", "tool") and isinstance(thinking, dict) and thinking.get("type") == "enabled":
        raise invalid("Thinking may not be enabled when tool_choice forces tool use.", param="tool_choice",
                      code="invalid_value")
    if value.get("disable_parallel_tool_use") is True:  # at most one call (engine/decode/call_limit.py)
        args["parallel_tool_calls"] = False


def parse_stop_sequences(value: list, body: dict, args: dict, v) -> None:
    for i, s in enumerate(value):
        where = f"stop_sequences[{i}]"
        if not isinstance(s, str):
            raise invalid(f"Invalid type for '{where}': expected a string", param=where, code="invalid_type",
                          data={"check": "type", "loc": f"stop_sequences.{i}", "expected": "a valid string"})
        if not s.strip():
            raise invalid(f"'{where}' must contain non-whitespace characters", param=where, code="invalid_value")
    args["stop"] = tuple(value)


def parse_template_kwargs(body: dict, args: dict, v) -> None:
    """The template_kwargs rule: template_vars and chat_template_kwargs together; their reasoning switches
    are the reasoning rule's."""
    merged: dict = {}
    for name in ("template_vars", "chat_template_kwargs"):
        merged.update(template_variables(body.get(name) or {}, name, TEMPLATE_REASONING_KEYS))
    args["template_kwargs"] = merged


def prefill_blocks(blocks: list[tuple[str, dict]], body: dict) -> list[tuple[str, dict]]:
    """A final assistant turn: its text blocks, which the answer continues (the API's prefill); none where
    it has no text (the API takes an empty final turn, which begins nothing)."""
    for where, b in blocks:
        if b["type"] == "tool_use":
            raise invalid(f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                          f"{b['id']}. Each `tool_use` block must have a corresponding `tool_result` block in the "
                          "next message.", param=where, code="invalid_value")
    text = [(where, b) for where, b in blocks if b["type"] == "text" and b["text"]]
    if not text:
        return []
    where = text[-1][0]
    if text[-1][1]["text"] != text[-1][1]["text"].rstrip():
        raise invalid("messages: final assistant content cannot end with trailing whitespace", param=where,
                      code="invalid_value")
    thinking, choice = body.get("thinking") or {}, body.get("tool_choice") or {}
    config = body.get("output_config") or {}
    refused = (("thinking.type", "thinking enabled", thinking.get("type") == "enabled"),
               ("tool_choice", f"tool_choice '{choice.get('type')}'", choice.get("type") in ("any", "tool")),
               ("output_config.format", "an output format", config.get("format") is not None),
               ("output_format", "an output format", body.get("output_format") is not None))
    for param, what, when in refused:
        if when:
            raise invalid(f"A final assistant message (prefill, {where}) cannot be continued with {what}: "
                          f"{'thinking' if param == 'thinking.type' else 'its grammar'} opens the answer",
                          param=param, code="unsupported_prefill")
    return text


# -- messages' blocks into turns -----------------------------------------------------------------------------
TURN_JOIN = "\n\n"  # the texts of one turn's blocks


def block_texts(blocks: list[tuple[str, dict]], role: str) -> list[str]:
    out = []
    for where, b in blocks:
        kind = b["type"]
        if kind == "text":
            out.append(b["text"])
        elif kind not in ("thinking", "redacted_thinking"):
            article = "an" if role == "assistant" else "a"
            raise invalid(f"content block type '{kind}' at {where} is not allowed in {article} {role} message",
                          param=f"{where}.type", code="invalid_value")
    return out


def check_user_content(content: str | list, where: str, i: int) -> None:
    """A user turn's content (``messages[i]``), refused as the API refuses it, in its words and its spelling of the
    place (``messages.3``; ``param`` keeps ours): empty (a string or no blocks), a text block with no text, or
    thinking (an assistant turn's: there is no turn here to give it to)."""
    if not content:
        raise invalid(f"messages.{i}: all messages must have non-empty content except for the optional final "
                      "assistant message", param=f"{where}.content", code="invalid_value")
    for j, b in enumerate(content if isinstance(content, list) else ()):
        if b.get("type") == "text" and b.get("text") == "":
            raise invalid("messages: text content blocks must be non-empty",
                          param=f"{where}.content[{j}].text", code="invalid_value")
        if b.get("type") in ("thinking", "redacted_thinking"):
            raise invalid(f"messages.{i}.content.{j}: thinking blocks may only be in `assistant` messages",
                          param=f"{where}.content[{j}].type", code="invalid_value")


def assistant_turn(blocks: list[tuple[str, dict]], names: dict[str, str]) -> Message:
    """An assistant turn: its text, its calls, its thinking as the turn's reasoning (see the header)."""
    texts, calls, thoughts = [], [], []
    for where, b in blocks:
        if b["type"] == "tool_use":
            call_id, name, args = b["id"], b["name"], b.get("input", {})
            names[call_id] = name
            calls.append(ToolCall(call_id, name, json.dumps(args, ensure_ascii=False)))
        elif b["type"] == "thinking":  # one whose display was omitted carries it in its signature (ours only)
            thoughts.append(b["thinking"] or thought_of(b.get("signature")))
        else:
            texts.extend(block_texts([(where, b)], "assistant"))
    return Message("assistant", TURN_JOIN.join(t for t in texts if t), tool_calls=tuple(calls),
                   reasoning=TURN_JOIN.join(t for t in thoughts if t) or None)


def user_turn(blocks: list[tuple[str, dict]], names: dict[str, str], offered: set[str]) -> list[Message]:
    results, texts, parts = [], [], []
    for where, b in blocks:
        if b["type"] == "tool_result":
            call_id = b["tool_use_id"]
            if call_id not in names:
                raise invalid(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. Each "
                              "`tool_result` block must have a corresponding `tool_use` block in an earlier "
                              "message.", param=f"{where}.tool_use_id", code="invalid_value")
            text, result_parts = _tool_result(b, where)
            results.append(Message("tool", text, parts=result_parts, tool_call_id=call_id, name=names.get(call_id),
                                   tool_references=_tool_references(b, where, offered)))
        elif b["type"] == "image":
            parts.append(image_block(b, where))
        elif b["type"] in READABLE:
            new = READABLE[b["type"]](b, where)
            texts.append(_texts(new))
            parts.extend(new)
        else:
            new = block_texts([(where, b)], "user")
            texts.extend(new)
            parts.extend(t for t in new if t)
    text = TURN_JOIN.join(t for t in texts if t)
    if not any(isinstance(p, ImagePart) for p in parts):
        parts = []
    return results + ([Message("user", text, parts=tuple(parts))] if text or parts or not results else [])
