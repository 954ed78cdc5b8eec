"""What ``record_proxy.py`` changes in a model request before forwarding it (``--upstream``): ``--tool-call``
asks the upstream's model for that call (a conversation's first request), ``--max-tokens`` caps every answer.
The record always holds the request as the client sent it. Python stdlib only, like the proxy."""

from __future__ import annotations

import gzip
import json
import sys

from record_canned import Canned


def asking_for_call(path: str, body: dict, name: str, args: dict) -> dict | None:
    """``body`` (a model request, as the client sent it) asking for exactly one call of tool ``name`` with
    ``args``: a forced tool choice, and the tool's parameters narrowed to those values. None when the request
    offers no such function tool (it goes on unchanged)."""
    schema = {"type": "object", "properties": {k: {"const": v} for k, v in args.items()},
              "required": list(args), "additionalProperties": False}
    body = json.loads(json.dumps(body))
    for tool in body.get("tools") or []:
        if path == "/v1/responses" and tool.get("type") == "function" and tool.get("name") == name:
            tool.update(parameters=schema, strict=True)
            body.update(tool_choice={"type": "function", "name": name}, parallel_tool_calls=False)
            return body
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else None
        if path == "/v1/chat/completions" and fn is not None and fn.get("name") == name:
            fn.update(parameters=schema, strict=True)
            body.update(tool_choice={"type": "function", "function": {"name": name}}, parallel_tool_calls=False)
            return body
        if path == "/v1/messages" and tool.get("name") == name and "input_schema" in tool:
            tool["input_schema"] = schema
            body["tool_choice"] = {"type": "tool", "name": name, "disable_parallel_tool_use": True}
            return body
    return None


# each model route's own name for the answer's token budget
BUDGET = {"/v1/chat/completions": ("max_completion_tokens", "max_tokens"), "/v1/responses": ("max_output_tokens",),
          "/v1/messages": ("max_tokens",)}


def capped(path: str, body: dict, cap: int) -> dict:
    """``body`` with its answer's budget at most ``cap`` tokens (set where the client sent none, or null)."""
    names = BUDGET[path]
    sent = [n for n in names if n in body]
    body = dict(body)
    for n in sent or names[-1:]:
        body[n] = min(body[n], cap) if isinstance(body.get(n), int) else cap
    return body


def asking(path: str, raw: bytes, encoding: str, tool: tuple[str, dict] | None, max_tokens: int | None,
           seq: int) -> bytes:
    """The model request ``raw`` (request ``seq``, to ``path``, its content-encoding ``encoding``) as forwarded:
    ``tool`` asked for where no tool result is in it yet, its answer capped at ``max_tokens``; ``raw`` itself
    where neither changes it (or it is not a JSON object)."""
    try:
        body = json.loads(gzip.decompress(raw) if encoding == "gzip" else raw)
    except (OSError, ValueError):
        return raw
    if not isinstance(body, dict):
        return raw
    asked = body
    if tool and not Canned._has_tool_result(body):
        asked = asking_for_call(path, body, *tool)
        if asked is None:
            print(f"record_proxy: request #{seq} offers no tool {tool[0]!r}: forwarded as sent",
                  file=sys.stderr, flush=True)
            asked = body
    if max_tokens:
        asked = capped(path, asked, max_tokens)
    if asked is body:
        return raw
    out = json.dumps(asked).encode()
    return gzip.compress(out) if encoding == "gzip" else out
