"""Tool choice: the protocols' spellings of which tool the model must (or may) call, in one form.

``(mode, names)``: mode ``auto`` (the model decides), ``none`` (no call) or ``required`` (at least one call,
enforced by a grammar over the model family's own call markup); ``names`` restricts the calls to those tools
(empty: any tool offered). A named tool is ``("required", (name,))``; ``allowed_tools`` keeps its mode.
Which tools exist is checked by the engine, which sees the whole tool list.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import invalid

Choice = tuple[str, tuple[str, ...]]


def _name(obj: Any, where: str) -> str:
    """A tool reference: ``{"type": "function", "name": N}`` (Responses) or ``{"function": {"name": N}}``
    (Chat Completions); both are read on both APIs."""
    if isinstance(obj, dict):
        inner = obj.get("function") if isinstance(obj.get("function"), dict) else \
            obj.get("custom") if isinstance(obj.get("custom"), dict) else obj
        name = inner.get("name")
        if isinstance(name, str) and name:
            return name
    raise invalid(f"Missing required parameter: '{where}.name' (the tool to call)", param=f"{where}.name",
                  code="missing_required_parameter")


def openai(value: Any, modes=("auto", "none", "required")) -> Choice:
    """Chat Completions' and Responses' ``tool_choice``."""
    if isinstance(value, str):
        if value not in modes:
            raise invalid(f"Invalid value for 'tool_choice': {json.dumps(value)} is not one of {list(modes)}",
                          param="tool_choice", code="invalid_value")
        return value, ()
    if not isinstance(value, dict):
        raise invalid("Invalid type for 'tool_choice': expected a string or an object", param="tool_choice",
                      code="invalid_type")
    kind = value.get("type")
    if kind in ("function", "custom"):
        return "required", (_name(value, "tool_choice"),)
    if kind == "allowed_tools":
        spec = value.get("allowed_tools") if isinstance(value.get("allowed_tools"), dict) else value
        where = "tool_choice.allowed_tools" if spec is not value else "tool_choice"
        mode = spec.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise invalid(f"Invalid value for '{where}.mode': {json.dumps(mode)} is not one of ['auto', 'required']",
                          param=f"{where}.mode", code="invalid_value")
        tools = spec.get("tools")
        if not isinstance(tools, list) or not tools:
            raise invalid(f"Missing required parameter: '{where}.tools' (a non-empty array)", param=f"{where}.tools",
                          code="missing_required_parameter")
        return mode, tuple(_name(t, f"{where}.tools[{i}]") for i, t in enumerate(tools))
    raise invalid(f"tool_choice of type {json.dumps(kind)} is not supported: this server takes 'auto', 'none', "
                  "'required', a function or custom tool by name, or 'allowed_tools'", param="tool_choice.type",
                  code="unsupported_value")


def forces(value: Any) -> bool:
    """Whether an OpenAI ``tool_choice`` (either API's spelling; None: absent) forces a call: a grammar then
    opens the answer. A bad value raises as ``openai`` does."""
    return value is not None and openai(value)[0] == "required"


def responses_spelling(value: Any) -> Any:
    """A checked OpenAI ``tool_choice`` as the Responses API spells it (what a Response echoes): a tool by
    ``name`` at the top, ``allowed_tools`` with its ``mode`` and ``tools`` at the top, each tool by type and name
    (Chat Completions nests them one level down; both are read on both APIs)."""
    if not isinstance(value, dict):
        return value
    kind = value["type"]
    if kind in ("function", "custom"):
        return {"type": kind, "name": _name(value, "tool_choice")}
    spec = value["allowed_tools"] if isinstance(value.get("allowed_tools"), dict) else value
    return {"type": "allowed_tools", "mode": spec.get("mode", "auto"),
            "tools": [{"type": t.get("type", "function"), "name": _name(t, "tool_choice")} for t in spec["tools"]]}


def anthropic(value: dict) -> Choice:
    """Messages' ``tool_choice``: auto / any / tool (by name) / none."""
    kind = value.get("type")
    if kind in ("auto", "none"):
        return kind, ()
    if kind == "any":
        return "required", ()
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str) or not name:
            raise invalid("Missing required parameter: 'tool_choice.name'", param="tool_choice.name",
                          code="missing_required_parameter")
        return "required", (name,)
    raise invalid(f"Invalid value for 'tool_choice.type': {json.dumps(kind)} is not one of "
                  "['auto', 'any', 'tool', 'none']", param="tool_choice.type", code="invalid_value")
