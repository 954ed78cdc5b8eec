"""Helpers for the compaction tests: a short coding history to compact, a summary that fits, and the payload a
compaction item carries (its encrypted_content, decoded); a conversation whose client-executed tool search
loaded a deferred tool (SEARCHED), and a server on a recording scripted backend;
INPUT: that history between a developer message and a newest user turn, and SUMMARY, the summary it compacts to."""

from __future__ import annotations

import base64
import json

from backends import Recording
from tool_search_helpers import MCP_ECHO, RESPONSES_SEARCH, SHELL
from tinytitan.engine.backends.scripted import ScriptEntry


HISTORY = [
    {"type": "message", "role": "user", "content": "Fix the bug in src/app.py please."},
    {"type": "message", "role": "assistant", "content": "Looking at it."},
    {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd": "cat src/app.py"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "def main(): retrun 1"},
]
SHORT = "Requirements: fix src/app.py. Next step: correct `retrun`."


def payload(item) -> dict:
    return json.loads(base64.b64decode(item["encrypted_content"]))


MODEL = "tinytitan-scripted"
ECHO_DEF = {k: v for k, v in MCP_ECHO.items() if k != "defer_loading"}
SEARCHED = [
    {"type": "message", "role": "user", "content": "echo m-42 with the demo tool"},
    {"type": "tool_search_call", "call_id": "ts_1", "execution": "client", "arguments": {"query": "echo"},
     "status": "completed"},
    {"type": "tool_search_output", "call_id": "ts_1", "execution": "client", "status": "completed",
     "tools": [ECHO_DEF]},
    {"type": "message", "role": "assistant", "content": "Found it."},
]
TOOLS = [SHELL, RESPONSES_SEARCH]
NEXT = {"type": "message", "role": "user", "content": "now echo it"}
ECHO_CALL = '<tool_call>\n{"name": "mcp__demo__echo", "arguments": {"text": "m-42"}}\n</tool_call>'


async def server(serve, demo_tok, *outputs):
    backend = Recording([ScriptEntry(o) for o in outputs], demo_tok, model_id=MODEL)
    return await serve(backend=backend), backend


SUMMARY = "Requirements: fix src/app.py. Next step: correct `retrun`."
INPUT = [{"type": "message", "role": "developer", "content": "You are a coding agent."}, *HISTORY,
         {"type": "message", "role": "user", "content": "Now run the tests."}]
