#!/usr/bin/env python3
"""A minimal stdio MCP server (JSON-RPC, one message a line) with one tool, ``echo``, for the end-to-end tests:
Claude Code lists it as a deferred tool and loads it through ToolSearch."""

import json
import sys


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


ECHO = {"name": "echo", "description": "Echo a text back",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}

for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid,
              "result": {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                         "capabilities": {"tools": {}}, "serverInfo": {"name": "demo", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [ECHO]}})
    elif method == "tools/call":
        text = msg["params"].get("arguments", {}).get("text", "")
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": f"echoed: {text}"}]}})
    elif mid is not None:  # any other request: an empty result; notifications need no answer
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
