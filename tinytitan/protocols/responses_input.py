"""Responses input items and tools → ChatRequest messages and tools (their shapes are checked by the
field schemas in spec/openai_responses.yaml before this runs).

Rules:
- ``input`` is a string (one user message) or a list of items. Their shapes are the spec's ``input.schema``
  (a 400 names the field, ``input[3].call_id``); here item ids are kept, or assigned, so stored input can
  be listed, and a message's string content becomes one text part.
- Messages: roles user, system, developer, assistant; content a string or text parts (``input_text``,
  ``output_text``, ``refusal``). ``instructions`` and every system and developer turn, wherever it stands,
  join the one leading system message (``common.place_system(merge_later=True)``).
- ``function_call`` items join the assistant turn before them, and so does an assistant message right after them
  (text the model wrote after its call); ``function_call_output`` becomes a tool turn.
  A ``reasoning`` item's text (its ``reasoning_text`` parts, else its summary) is the reasoning of the assistant
  turn that follows it before the next user message (the template renders it where the model saw it, so a tool
  loop's next turn reads the answer as generated); one with no text carries what its ``encrypted_content``
  holds where this server wrote it (``common.reasoning_payload``), another server's nothing; one a user message
  follows first is dropped. ``compaction`` items are decoded into the text closing the system prompt
  (``system_note``).
- Namespace tools are flattened into functions named ``<namespace without trailing _><sep><function>``
  (``flat_name``; the separator is the spec's ``extra.namespace_separator``, ``__``); a call the model makes
  to one is reported with its own name and ``namespace``.
- Hosted tools (web_search, file_search, code_interpreter, image_generation, computer use, shell,
  a server-executed tool_search, apply_patch …) are left out of the prompt; the request is served.
- A client-executed ``tool_search`` (Codex's) is served as Messages' tool search is: a ``tool_search`` function
  in the header, tools with ``defer_loading`` left out of it; the model's call comes back as a
  ``tool_search_call`` item, and a ``tool_search_output`` item's tools are declared where it stands (so loading
  them appends to the prompt) and can be called from then on. Freeform ``custom`` tools
  reach the model as functions of one string, ``input`` (tinytitan/custom_tools.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from .. import custom_tools, images
from ..chat_request import Message, Tool, ToolCall
from ..errors import invalid
from . import compaction
from .base import new_id
from .common import RUN_BREAK, content_of, thought_of

log = logging.getLogger("tinytitan.responses")

DEFAULT_SEPARATOR = "__"
TEXT_KEYS = {k: "text" for k in ("input_text", "output_text", "text", "summary_text", "reasoning_text")} | {
    "refusal": "refusal"}
ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
             "compaction": "cmp_", "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_",
             "tool_search_call": "tsc_", "tool_search_output": "tso_"}
# client-executed tool search: the function the model calls to search (the tool's own description and
# parameters where it sends them)
SEARCH_TOOL = "tool_search"
SEARCH_DESCRIPTION = ("Searches the deferred tools (whose definitions are not loaded yet) and loads the matching "
                      "ones: their definitions come back in the result, then they can be called.")
SEARCH_PARAMETERS = {"type": "object", "properties": {"query": {"type": "string", "description": "What to search "
                                                                "for among the deferred tools"}},
                     "required": ["query"]}


def flat_name(namespace: str, name: str, sep: str = DEFAULT_SEPARATOR) -> str:
    return f"{namespace.rstrip('_')}{sep}{name}"


def with_namespace_description(about: str, description: str) -> str:
    """A namespace function's description, led by its namespace's own (where the namespace has one)."""
    about = about.strip()
    if not about:
        return description
    return f"{about}\n\n{description}" if description else about


def input_image(part: dict, where: str):
    """An ``input_image`` part: its ``image_url`` a data URL (``file_id`` is refused by the spec); ``detail``
    is the model processor's business, not the request's."""
    if not part.get("image_url"):
        raise invalid(f"Missing required parameter: '{where}.image_url' (send the image as a base64 data URL)",
                      param=f"{where}.image_url", code="missing_required_parameter")
    return images.from_url(part["image_url"], where)


def content_parts(content, where: str) -> tuple[str, tuple]:
    """A checked message content or tool output → (its text, its parts where it holds an image)."""
    if not isinstance(content, list) or not any(p["type"] == "input_image" for p in content):
        return compaction.parts_text(content), ()
    return content_of(content, where, {"input_image": input_image}, TEXT_KEYS)


def normalise_input(value) -> list[dict]:
    """The checked ``input`` field (its shape is the spec's ``input.schema``) as a list of items, each with a
    ``type``, an ``id`` and a message's content as parts."""
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": value}]
    items = []
    for i, raw in enumerate(value):
        item = dict(raw)
        if item.get("type") is None:  # the API's easy message (a role) and item reference (an id) omit it
            item["type"] = "message" if "role" in item else "item_reference"
        kind = item["type"]
        if kind == "message":
            item["content"] = _message_parts(item)
        elif kind == "function_call":
            if not isinstance(item.get("arguments", ""), str):
                item["arguments"] = json.dumps(item["arguments"], ensure_ascii=False)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if isinstance(item.get("output"), list):  # (as listed back: an image's detail is the API's default)
                item["output"] = [_listed(part) for part in item["output"]]
        elif kind == "compaction":
            compaction.decode(item["encrypted_content"], f"input[{i}].encrypted_content")
        if kind not in ("item_reference", "compaction_trigger") and not isinstance(item.get("id"), str):
            item["id"] = new_id(ID_PREFIX.get(kind, "item_"))
        items.append(item)
    return items


def _message_parts(item: dict) -> list[dict]:
    """A message's content as the API lists it back (``input_items``): parts, an assistant's text as
    ``output_text`` with its ``annotations``, anyone else's as ``input_text`` (``text``: a lenience)."""
    assistant = item["role"] == "assistant"
    content = item.get("content")
    if not isinstance(content, list):
        content = [{"type": "output_text" if assistant else "input_text", "text": content or ""}]
    parts = []
    for part in content:
        part = dict(part)
        if part["type"] in ("text", "input_text", "output_text"):
            part["type"] = "output_text" if assistant else "input_text"
        if part["type"] == "output_text":
            part.setdefault("annotations", [])
        parts.append(_listed(part))
    return parts


def _listed(part: dict) -> dict:
    """A content part as the API lists it back: an image's ``detail`` is ``auto`` where none was sent."""
    if part.get("type") == "input_image" and part.get("detail") is None:
        return {**part, "detail": "auto"}
    return part


def searches_in_client(value: list) -> bool:
    """Whether the tools offer a client-executed tool search (``{"type": "tool_search", "execution": "client"}``):
    then deferred tools (``defer_loading``) stay out of the tool header until a ``tool_search_output`` loads them.
    A server-executed one is a hosted tool this server does not run: left out, and every tool declared in full."""
    return any(isinstance(t, dict) and t.get("type") == "tool_search" and t.get("execution") == "client"
               for t in value)


def parse_tools(value: list, sep: str = DEFAULT_SEPARATOR) -> tuple[list[Tool], dict[str, tuple[str | None, str]]]:
    """Checked tools (the spec's ``tools.schema``): function and namespace tools → flat functions, plus
    ``{flat name: (namespace, name)}``; a client-executed tool search → the ``tool_search`` function."""
    tools: list[Tool] = []
    names: dict[str, tuple[str | None, str]] = {}
    deferring = searches_in_client(value)

    def add(tool: Tool, where: str, name: str) -> None:
        if tool.name in names:
            raise invalid(f"Duplicate tool name '{tool.name}' at {where} (namespace tools are named "
                          f"'<namespace>{sep}<function>')", param=f"{where}.name", code="invalid_value")
        names[tool.name] = (tool.namespace, name)
        tools.append(tool)

    def function(fn: dict, namespace: str | None, where: str, deferred: bool = False, about: str = "") -> Tool:
        callers = fn.get("allowed_callers")
        if callers is not None and "direct" not in callers:  # only a program may call it: none runs here
            raise invalid(f"'allowed_callers' at {where} without 'direct' is not supported: no programmatic tool "
                          "calling runs here, the model calls tools directly", param=f"{where}.allowed_callers",
                          code="unsupported_value")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        flat = flat_name(namespace, fn["name"], sep) if namespace else fn["name"]
        description = with_namespace_description(about, fn.get("description") or "")
        if fn.get("output_schema"):  # what the function's output holds: the model reads it as the API shows it
            shown = json.dumps(fn["output_schema"], ensure_ascii=False)
            description = f"{description}\n\nIts output is JSON text matching: {shown}".lstrip()
        return Tool(flat, description, params, namespace=namespace, strict=fn.get("strict") is True,
                    deferred=deferring and (deferred or fn.get("defer_loading") is True))

    for i, t in enumerate(value):
        where = f"tools[{i}]"
        kind = t.get("type")
        if kind == "function":
            add(function(t, None, where), where, t["name"])
        elif kind == "custom":
            tool = custom_tools.parse(t, where)
            add(tool, where, tool.name)
        elif kind == "namespace":
            # the namespace's own description (Codex: the MCP server's or connector's) reaches the model with
            # each of its functions, which are declared flattened (a template has no namespace to put it on)
            about = t.get("description") if isinstance(t.get("description"), str) else ""
            for j, fn in enumerate(t["tools"]):
                if fn.get("type", "function") == "function":
                    add(function(fn, t["name"], f"{where}.tools[{j}]", t.get("defer_loading") is True, about),
                        f"{where}.tools[{j}]", fn["name"])
                elif fn.get("type") == "custom":  # flattened as a function is; its call carries the namespace
                    tool = custom_tools.parse(fn, f"{where}.tools[{j}]")
                    add(replace(tool, name=flat_name(t["name"], tool.name, sep), namespace=t["name"],
                                description=with_namespace_description(about, tool.description)),
                        f"{where}.tools[{j}]", tool.name)
                else:
                    log.info("%s.tools[%d]: %s tool '%s' left out of the prompt", where, j, fn.get("type"),
                             fn.get("name"))
        elif kind == "tool_search" and t.get("execution") == "client":
            add(Tool(SEARCH_TOOL, t.get("description") or SEARCH_DESCRIPTION, t.get("parameters") or SEARCH_PARAMETERS),
                where, SEARCH_TOOL)
        else:
            log.debug("%s: %s tool left out of the prompt (not run by this server)", where, kind)
    return tools, names


def loaded_tools(items: list[dict], sep: str = DEFAULT_SEPARATOR) -> tuple[list[Tool], dict]:
    """The tools ``tool_search_output`` items loaded (deferred: each is declared where its output stands), with
    their ``{flat name: (namespace, name)}``; a tool loaded twice is the first one."""
    tools: list[Tool] = []
    names: dict = {}
    for item in items:
        if item.get("type") != "tool_search_output":
            continue
        found, found_names = parse_tools(item["tools"], sep)
        for tool in found:
            if tool.name not in names:
                names[tool.name] = found_names[tool.name]
                tools.append(replace(tool, deferred=True))
    return tools, names


def _loaded_names(item: dict, sep: str) -> tuple[str, ...]:
    out = []
    for t in item["tools"]:
        if t.get("type") == "namespace":
            out += [flat_name(t["name"], fn["name"], sep) for fn in t.get("tools") or ()
                    if fn.get("type", "function") == "function"]
        else:
            out.append(t["name"])
    return tuple(out)


def item_place(item: dict, places: dict[str, str]) -> str:
    """Where an item stands in this request (``input[3]``), or, one of the stored chain, its id."""
    return places.get(item.get("id")) or f"item '{item.get('id')}'"


def item_content(item: dict, field: str, places: dict[str, str]) -> tuple[str, tuple]:
    """A message's ``content`` or a tool's ``output`` → (its text, its parts where it holds an image): images
    read, and refused, as a request's are (only a user message or a tool output holds one)."""
    where = item_place(item, places)
    text, parts = content_parts(item.get(field), f"{where}.{field}")
    role = item.get("role") if item.get("type") == "message" else None
    if parts and role not in (None, "user"):
        raise invalid(f"input_image in the {role} message ({where}) is not supported: images go in user messages "
                      "and function call outputs", param=f"{where}.content", code="unsupported_content")
    return text, parts


def to_messages(items: list[dict], sep: str = DEFAULT_SEPARATOR,
                places: dict[str, str] | None = None) -> tuple[list[str], list[Message]]:
    """Items (a stored chain's input and output, then this request's input) → (texts for the leading system
    message, the conversation). ``places``: item id → where the item stands in this request (``input[3]``),
    what an error about one of its images names; an item of the stored chain is named by its id."""
    places = places or {}

    def place(item: dict) -> str:
        return item_place(item, places)

    system: list[str] = []
    msgs: list[Message] = []
    call_names: dict[str, str] = {}

    thought: list[str] = []  # reasoning items' text, waiting for the assistant turn they precede

    def assistant(message: Message) -> None:
        msgs.append(replace(message, reasoning="\n\n".join(thought) or None) if thought else message)
        thought.clear()

    def tool_call(call: ToolCall) -> None:
        call_names[call.id] = call.name
        last = msgs[-1] if msgs else None
        if last is not None and last.role == "assistant" and not thought:
            msgs[-1] = replace(last, tool_calls=last.tool_calls + (call,))
        else:
            assistant(Message("assistant", "", tool_calls=(call,)))

    for item in items:
        kind = item.get("type")
        if kind in ("function_call_output", "custom_tool_call_output", "tool_search_output") \
                and item["call_id"] not in call_names:  # the API's own words
            raise invalid(f"No tool call found for {kind.replace('_', ' ')} with call_id {item['call_id']} "
                          f"({place(item)}).", param=f"{place(item)}.call_id", code="invalid_value")
        if kind == "message":
            role = item["role"]
            text, parts = item_content(item, "content", places)
            last = msgs[-1] if msgs else None
            if role == "assistant" and last is not None and last.role == "assistant" and last.tool_calls \
                    and not thought:
                # text the model wrote after its call (the output lists it after the function_call): the same turn,
                # as Chat and Ollama carry it (a paragraph break between the runs, as they join them), so the
                # call's output still follows the turn that made it
                joint = RUN_BREAK if last.content and text else ""
                msgs[-1] = replace(last, content=last.content + joint + text)
                continue
            message = Message("system" if role == "developer" else role, text, parts=parts)
            if role == "user":  # a thought no assistant turn followed (an answer that only thought) ends here
                thought.clear()
            assistant(message) if role == "assistant" else msgs.append(message)
        elif kind == "function_call":
            name = flat_name(item["namespace"], item["name"], sep) if item.get("namespace") else item["name"]
            tool_call(ToolCall(item["call_id"], name, item.get("arguments") or ""))
        elif kind == "custom_tool_call":
            name = flat_name(item["namespace"], item["name"], sep) if item.get("namespace") else item["name"]
            tool_call(ToolCall(item["call_id"], name, json.dumps({"input": item["input"]}, ensure_ascii=False)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            text, parts = item_content(item, "output", places)
            msgs.append(Message("tool", text, parts=parts, tool_call_id=item["call_id"], name=call_names.get(item["call_id"])))
        elif kind == "tool_search_call":
            tool_call(ToolCall(item["call_id"], SEARCH_TOOL, json.dumps(item["arguments"], ensure_ascii=False)))
        elif kind == "tool_search_output":  # the loaded tools' definitions are rendered here (Message.tool_references)
            msgs.append(Message("tool", "", tool_call_id=item["call_id"], name=SEARCH_TOOL,
                                tool_references=_loaded_names(item, sep)))
        elif kind == "compaction":
            system.append(compaction.as_context(compaction.decode(item["encrypted_content"], "input")))
        elif kind == "reasoning":
            thought.extend(t for t in (reasoning_text(item),) if t)
    return system, msgs


def reasoning_text(item: dict) -> str:
    """A reasoning item's thought: its reasoning_text parts, else its summary's text, else what its
    ``encrypted_content`` carries where this server wrote it (another's is opaque: nothing a model here reads)."""
    for key in ("content", "summary"):
        text = "".join(p.get("text") or "" for p in item.get(key) or () if isinstance(p, dict))
        if text:
            return text
    return thought_of(item.get("encrypted_content"))
