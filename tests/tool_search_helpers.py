"""Tool search's test helpers: Claude Code's ToolSearch tool with a deferred echo tool and placeholder, the echo
tool's declaration in the demo template's header, a three-request ToolSearch session as Claude Code sends it,
and Codex's client-executed tool_search with its shell and deferred MCP echo tool."""

from __future__ import annotations

import json


SEARCH = {"name": "ToolSearch", "description": "Fetches full schema definitions for deferred tools.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
ECHO = {"name": "mcp__demo__echo", "description": "Echo a text back",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "defer_loading": True}
PLACEHOLDER = {"name": "DeferredToolPlaceholder", "description": "never call this tool",
               "input_schema": {"type": "object", "properties": {}}, "defer_loading": True}
# Qwen's header line for a tool (the demo template's ``tools | tojson`` per tool)
ECHO_DECLARED = json.dumps({"type": "function", "function": {"name": ECHO["name"], "description": ECHO["description"],
                                                             "parameters": ECHO["input_schema"]}})


def session(call_ids: tuple[str, str] = ("t1", "t2")) -> list[list[dict]]:
    """The messages of a three-request ToolSearch session, as Claude Code sends them."""
    first = [{"role": "user", "content": "echo m-42 with the demo tool"}]
    second = first + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_ids[0], "name": "ToolSearch",
                                           "input": {"query": "select:mcp__demo__echo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_ids[0],
                                      "content": [{"type": "tool_reference", "tool_name": "mcp__demo__echo"}]}]}]
    third = second + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_ids[1], "name": "mcp__demo__echo",
                                           "input": {"text": "m-42"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_ids[1], "content": "echoed: m-42"}]}]
    return [first, second, third]


# Codex's client-executed tool search ({"type": "tool_search", "execution": "client"})
RESPONSES_SEARCH = {"type": "tool_search", "execution": "client", "description": "Search the deferred tools.",
                    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                   "required": ["query"]}}
SHELL = {"type": "function", "name": "exec_command", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
MCP_ECHO = {"type": "function", "name": "mcp__demo__echo", "description": "Echo a text back",
            "parameters": ECHO["input_schema"], "defer_loading": True}
