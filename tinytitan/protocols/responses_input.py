"""Responses input items and tools → ChatRequest messages and tools (what spec/openai_responses.yaml
cannot say as a table).

Rules:
- ``input`` is a string (one user message) or a list of items. Every item is checked here, naming the
  field (``input[3].call_id``) on a 400; item ids are kept, or assigned, so stored input can be listed.
- Messages: roles user, system, developer, assistant; content a string or text parts (``input_text``,
  ``output_text``, ``refusal``). ``instructions`` and every system and developer turn, wherever it stands,
  join the one leading system message (``common.place_system(merge_later=True)``).
- ``function_call`` items join the assistant turn before them; ``function_call_output`` becomes a tool turn.
  ``reasoning`` items are accepted and skipped. ``compaction`` items are decoded into the system prompt.
- Namespace tools are flattened into functions named ``<namespace without trailing _><sep><function>``
  (``flat_name``; the separator is the spec's ``extra.namespace_separator``, ``__``); a call the model makes
  to one is reported with its own name and ``namespace``.
- Hosted tools (web_search, file_search, code_interpreter, image_generation, computer use, shell,
  tool_search, apply_patch …) are left out of the prompt; the request is served. Freeform ``custom`` tools
  reach the model as functions of one string, ``input`` (tinytitan/custom_tools.py).
"""

from __future__ import annotations

import json
import logging
import uuid

from .. import custom_tools
from ..chat_request import Message, Tool, ToolCall
from ..errors import invalid
from . import compaction

log = logging.getLogger("tinytitan.responses")

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
DEFAULT_SEPARATOR = "__"
ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
             "compaction": "cmp_", "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_"}


def flat_name(namespace: str, name: str, sep: str = DEFAULT_SEPARATOR) -> str:
    return f"{namespace.rstrip('_')}{sep}{name}"


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _str(item: dict, key: str, where: str, required: bool = True) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value and key != "arguments"):
        if value is None:
            raise invalid(f"Missing required parameter: '{where}.{key}'", param=f"{where}.{key}",
                          code="missing_required_parameter")
        raise invalid(f"Invalid type for '{where}.{key}': expected a non-empty string", param=f"{where}.{key}",
                      code="invalid_type")
    return value


def parts_text(content, where: str) -> str:
    """A message's content (a string or text parts) as one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"Invalid type for '{where}': expected a string or an array of content parts", param=where,
                      code="invalid_type")
    out = []
    for j, part in enumerate(content):
        pw = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise invalid(f"Invalid type for '{pw}': expected a content part object", param=pw, code="invalid_type")
        kind = part.get("type")
        key = "refusal" if kind == "refusal" else "text"
        if kind not in TEXT_PARTS + ("refusal",):
            raise invalid(f"content part type '{kind}' at {pw} is not supported: this server takes text only",
                          param=f"{pw}.type", code="unsupported_content")
        if not isinstance(part.get(key), str):
            raise invalid(f"Missing required parameter: '{pw}.{key}'", param=f"{pw}.{key}",
                          code="missing_required_parameter")
        out.append(part[key])
    return "\n".join(out)


def normalise_input(value, field: str = "input") -> list[dict]:
    """The ``input`` field as a list of checked items, each with an ``id``."""
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": value}]
    items = []
    for i, raw in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(raw, dict):
            raise invalid(f"Invalid type for '{where}': expected an input item object", param=where,
                          code="invalid_type")
        item = dict(raw)
        if item.get("type") is None:  # the API's easy message (a role) and item reference (an id) omit it
            item["type"] = "message" if "role" in item else "item_reference" if "id" in item else None
        kind = item["type"]
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise invalid(f"Invalid value for '{where}.role': {json.dumps(role)} is not one of {list(ROLES)}",
                              param=f"{where}.role", code="invalid_value")
            text = parts_text(item.get("content"), f"{where}.content")
            if isinstance(item.get("content"), str) or item.get("content") is None:
                part = "output_text" if role == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": text}]
            item.setdefault("status", "completed")
        elif kind == "function_call":
            _str(item, "call_id", where)
            _str(item, "name", where)
            _str(item, "namespace", where, required=False)
            args = item.get("arguments", "")
            if not isinstance(args, str):
                item["arguments"] = json.dumps(args, ensure_ascii=False)
            item.setdefault("status", "completed")
        elif kind == "function_call_output":
            _str(item, "call_id", where)
            if item.get("output") is None:
                raise invalid(f"Missing required parameter: '{where}.output'", param=f"{where}.output",
                              code="missing_required_parameter")
            parts_text(item["output"], f"{where}.output")
            item.setdefault("status", "completed")
        elif kind == "custom_tool_call":
            _str(item, "call_id", where)
            _str(item, "name", where)
            if not isinstance(item.get("input"), str):
                raise invalid(f"Missing required parameter: '{where}.input'", param=f"{where}.input",
                              code="missing_required_parameter")
        elif kind == "custom_tool_call_output":
            _str(item, "call_id", where)
            parts_text(item.get("output"), f"{where}.output")
        elif kind == "item_reference":
            _str(item, "id", where)
        elif kind == "compaction":
            _str(item, "encrypted_content", where)
            compaction.decode(item["encrypted_content"], f"{where}.encrypted_content")
        elif kind in ("reasoning", "compaction_trigger"):
            pass
        else:
            raise invalid(f"input item type '{kind}' at {where} is not supported", param=f"{where}.type",
                          code="unsupported_value")
        if kind not in ("item_reference", "compaction_trigger") and not isinstance(item.get("id"), str):
            item["id"] = _new_id(ID_PREFIX.get(kind, "item_"))
        items.append(item)
    return items


def parse_tools(value: list, sep: str = DEFAULT_SEPARATOR) -> tuple[list[Tool], dict[str, tuple[str | None, str]]]:
    """Function and namespace tools → flat functions, plus ``{flat name: (namespace, name)}``."""
    tools: list[Tool] = []
    names: dict[str, tuple[str | None, str]] = {}

    def add(fn: dict, where: str, namespace: str | None) -> None:
        name = _str(fn, "name", where)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise invalid(f"Invalid type for '{where}.parameters': expected an object", param=f"{where}.parameters",
                          code="invalid_type")
        flat = flat_name(namespace, name, sep) if namespace else name
        if flat in names:
            raise invalid(f"Duplicate tool name '{flat}' at {where} (namespace tools are named "
                          f"'<namespace>{sep}<function>')", param=f"{where}.name", code="invalid_value")
        names[flat] = (namespace, name)
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise invalid(f"Invalid type for '{where}.description': expected a string", param=f"{where}.description",
                          code="invalid_type")
        tools.append(Tool(flat, description, params, namespace=namespace, strict=fn.get("strict") is True))

    for i, t in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise invalid(f"Invalid type for '{where}': expected a tool object", param=where, code="invalid_type")
        kind = t.get("type")
        if kind == "function":
            add(t, where, None)
        elif kind == "custom":
            tool = custom_tools.parse(t, where)
            if tool.name in names:
                raise invalid(f"Duplicate tool name '{tool.name}' at {where}", param=f"{where}.name", code="invalid_value")
            names[tool.name] = (None, tool.name)
            tools.append(tool)
        elif kind == "namespace":
            ns = _str(t, "name", where)
            inner = t.get("tools")
            if not isinstance(inner, list):
                raise invalid(f"Missing required parameter: '{where}.tools'", param=f"{where}.tools",
                              code="missing_required_parameter")
            for j, fn in enumerate(inner):
                fw = f"{where}.tools[{j}]"
                if not isinstance(fn, dict):
                    raise invalid(f"Invalid type for '{fw}': expected a tool object", param=fw, code="invalid_type")
                if fn.get("type", "function") == "function":
                    add(fn, fw, ns)
                else:
                    log.info("%s: %s tool '%s' left out of the prompt", fw, fn.get("type"), fn.get("name"))
        else:
            log.debug("%s: %s tool left out of the prompt (not run by this server)", where, kind)
    return tools, names


def to_messages(items: list[dict], sep: str = DEFAULT_SEPARATOR) -> tuple[list[str], list[Message]]:
    """Items (a stored chain's input and output, then this request's input) → (texts for the leading system
    message, the conversation)."""
    system: list[str] = []
    msgs: list[Message] = []
    call_names: dict[str, str] = {}

    def tool_call(call: ToolCall) -> None:
        call_names[call.id] = call.name
        last = msgs[-1] if msgs else None
        if last is not None and last.role == "assistant":
            msgs[-1] = Message("assistant", last.content, last.tool_calls + (call,), reasoning=last.reasoning)
        else:
            msgs.append(Message("assistant", "", (call,)))

    for item in items:
        kind = item.get("type")
        if kind == "message":
            role = item["role"]
            text = parts_text(item.get("content"), "input")
            msgs.append(Message("system" if role == "developer" else role, text))
        elif kind == "function_call":
            name = flat_name(item["namespace"], item["name"], sep) if item.get("namespace") else item["name"]
            tool_call(ToolCall(item["call_id"], name, item.get("arguments") or ""))
        elif kind == "custom_tool_call":
            tool_call(ToolCall(item["call_id"], item["name"], json.dumps({"input": item["input"]}, ensure_ascii=False)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            msgs.append(Message("tool", parts_text(item.get("output"), "output"), tool_call_id=item["call_id"],
                                name=call_names.get(item["call_id"])))
        elif kind == "compaction":
            system.append(compaction.as_context(compaction.decode(item["encrypted_content"], "input")))
        # reasoning items: accepted and skipped
    return system, msgs
